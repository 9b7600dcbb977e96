-- Unit tests of deploy/slurm/job_submit.lua without Slurm: a stub slurm
-- table (the names job_submit_lua.c and slurm_lua.c register) and a fake
-- headroom CLI, a shell script that records its arguments and prints a
-- canned answer. Run: lua5.1 tests/slurm/job_submit_test.lua (from the
-- repository root; scripts/test-slurm.sh does).

local logs, user_msgs = {}, {}
slurm = {
  SUCCESS = 0, ERROR = -1, NO_VAL = 4294967294,
  log_info = function(fmt, ...) table.insert(logs, string.format(fmt, ...)) end,
  log_error = function(fmt, ...) table.insert(logs, string.format(fmt, ...)) end,
  log_user = function(fmt, ...) table.insert(user_msgs, string.format(fmt, ...)) end,
}
assert(dofile("deploy/slurm/job_submit.lua") == 0)
local M = headroom_filter

local failures, checks = 0, 0
local function check(cond, what)
  checks = checks + 1
  if not cond then
    failures = failures + 1
    io.stderr:write("FAIL: " .. what .. "\n")
  end
end
local function eq(got, want, what)
  check(got == want, string.format("%s: got %s, want %s", what,
                                   tostring(got), tostring(want)))
end
local function has(text, part, what)
  check(text and text:find(part, 1, true) ~= nil,
        string.format("%s: %q does not contain %q", what, tostring(text), part))
end

local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p " .. M.shell_quote(tmp))

-- Shell quoting: a quote closes, is escaped, reopens.
eq(M.shell_quote("a'b"), "'a'\\''b'", "shell_quote")

-- The description: the comment first, else #HEADROOM lines before the
-- script's first command (sbatch's rule for #SBATCH).
local d, where = M.description("headroom: --model gpt2 --batch 4", nil)
eq(d, "--model gpt2 --batch 4", "comment description")
eq(where, "--comment", "comment source")
d, where = M.description(nil, "#!/bin/sh\n#SBATCH --gres=gpu:l4:1\n" ..
  "#HEADROOM --model gpt2\n\n#HEADROOM --batch 4\necho hi\n#HEADROOM --batch 8\n")
eq(d, "--model gpt2 --batch 4", "script description stops at the first command")
eq(where, "#HEADROOM", "script source")
eq(M.description("a plain comment", "#!/bin/sh\necho\n"), nil, "no description")

-- Words outside the allowed characters never reach a shell.
for _, bad in ipairs({ "gpt2;id", "$(id)", "`id`", "a'b", 'a"b', "a|b",
                       "a&b", "a>b", "a\\b", "~root", "a*b" }) do
  local r, err = M.parse_description("--model " .. bad, "--comment", "/w", {})
  eq(r, nil, "refused " .. bad)
  has(err, "character outside A-Za-z0-9._,/:=+-", "names the characters for " .. bad)
end
local r, err = M.parse_description("--gpu H100 --model gpt2", "--comment", "/w", {})
eq(r, nil, "--gpu refused")
has(err, "may not set --gpu: the GPU type comes from the job's --gres", "--gpu why")
r, err = M.parse_description("--server=10.0.0.1:1 --model gpt2", "--comment", "/w", {})
has(err, "may not set --server", "--server= refused")
r, err = M.parse_description("--model gpt2 -h", "--comment", "/w", {})
has(err, '"-h": flags are --name VALUE', "single dash refused")
r, err = M.parse_description("", "#HEADROOM", "/w", {})
has(err, "is empty", "empty description")

-- Files: relative to the job's working directory, no '..', inside job_dirs.
r = M.parse_description("--job=recipe.yaml --batch 2", "--comment", "/home/u/run", {})
eq(table.concat(r.args, " "), "--job /home/u/run/recipe.yaml --batch 2", "--job= resolved")
r = M.parse_description("--model ./cfg.json --lora-rank 16", "--comment", "/w/", {})
eq(table.concat(r.args, " "), "--model /w/cfg.json --lora_rank 16", "--model file resolved")
r = M.parse_description("--model meta-llama/Llama-3.1-8B", "--comment", "/w", {})
eq(r.args[2], "meta-llama/Llama-3.1-8B", "a Hub id is not a path")
r, err = M.parse_description("--job ../../etc/x.yaml", "--comment", "/w", {})
has(err, "'..' is not allowed", "'..' refused")
r, err = M.parse_description("--job /etc/x.yaml", "--comment", "/w", { "/shared" })
has(err, "outside the directories headroom.conf allows (job_dirs: /shared)", "job_dirs")
r = M.parse_description("--job /shared/r/x.yaml", "--comment", "/w", { "/shared" })
eq(r.flags.job, "/shared/r/x.yaml", "inside job_dirs")

-- GPU requests as 22.05 formats them (xfmt_tres, gres_prepend_tres_type).
local t, n = M.parse_gpu_tres("gres:gpu:l4:2")
eq(t .. ":" .. n, "l4:2", "typed count")
t, n = M.parse_gpu_tres("gres:gpu:3")
eq(t .. ":" .. n, ":3", "untyped count")
t, n = M.parse_gpu_tres("gres:nic:1,gres:gpu:h100")
eq(t .. ":" .. n, "h100:1", "type without a count is 1")
eq(M.parse_gpu_tres("gres:nic:1"), nil, "no GPU")
eq(M.parse_gpu_tres("gres:gpu:l4:1,gres:gpu:h100:1"), false, "two GPU entries")
local req = M.gpu_request({ tres_per_node = "gres:gpu:l4:2", min_nodes = 2 })
eq(req.gpus, 4, "2 per node x 2 nodes")
eq(req.per_node, 2, "per node")
req = M.gpu_request({ tres_per_node = "gres:gpu:l4:2", min_nodes = slurm.NO_VAL })
eq(req.gpus, 2, "min_nodes unset is 1 node")
req = M.gpu_request({ tres_per_task = "gres:gpu:1", num_tasks = 4 })
eq(req.gpus, 4, "1 per task x 4 tasks")
req = M.gpu_request({ tres_per_job = "gres:gpu:h100:8" })
eq(req.type .. req.gpus, "h1008", "--gpus in all")
eq(M.gpu_request({ tres_per_socket = "gres:gpu:1" }), false, "per socket unknown")

-- JSON.
local j = M.json_decode('{"a": [1, 2.5e1, -3], "b": {"c": "x\\"y\\u0041"}, "d": true, "e": null}')
eq(j.a[2], 25, "json number")
eq(j.a[3], -3, "json negative")
eq(j.b.c, 'x"yA', "json string escapes")
eq(j.d, true, "json true")
eq(select(2, M.json_decode("{")) ~= nil, true, "json error")

-- A fake CLI: writes its arguments, one per line, to args.N and its
-- HEADROOM_TOKEN to token.seen, prints the answer file matching its --gpus
-- value; exits with the code in rc.
local fake = tmp .. "/headroom"
local f = io.open(fake, "w")
f:write('#!/bin/sh\nn=$(ls "' .. tmp .. '"/args.* 2>/dev/null | wc -l)\n' ..
        'for a in "$@"; do printf "%s\\n" "$a"; done > "' .. tmp .. '/args.$n"\n' ..
        'printf "%s" "$HEADROOM_TOKEN" > "' .. tmp .. '/token.seen"\n' ..
        'mode=n; for a in "$@"; do [ "$a" = auto ] && mode=auto; done\n' ..
        'cat "' .. tmp .. '/answer.$mode" 2>/dev/null\n' ..
        'echo "$(cat "' .. tmp .. '/stderr" 2>/dev/null)" >&2\n' ..
        'exit $(cat "' .. tmp .. '/rc" 2>/dev/null || echo 0)\n')
f:close()
os.execute("chmod +x " .. M.shell_quote(fake))
local function put(name, text)
  local h = io.open(tmp .. "/" .. name, "w"); h:write(text); h:close()
end
local function reset()
  os.execute("rm -f " .. M.shell_quote(tmp) .. "/args.* " .. M.shell_quote(tmp) ..
             "/answer.* " .. M.shell_quote(tmp) .. "/rc " .. M.shell_quote(tmp) .. "/stderr")
  logs, user_msgs = {}, {}
end
local function args_of(i)
  local out = {}
  local h = io.open(tmp .. "/args." .. i)
  if not h then return nil end
  for line in h:lines() do table.insert(out, line) end
  h:close()
  return table.concat(out, " ")
end

put("headroom.conf", "planner = 127.0.0.1:1\ncli = " .. fake .. "\ntimeout_s = 5\n" ..
    "gpu_type.l4 = L4\ngpu_type.h100 = H100\ngpu_type.rtx = RTX PRO 6000 Blackwell\n")
M.conf_path = tmp .. "/headroom.conf"

-- Arguments reach the CLI as words, whatever they hold (headroom.conf values
-- may have spaces and quotes).
reset()
local conf = M.read_conf(M.conf_path)
local canary = tmp .. "/pwned"
local rc = M.run_cli(conf, { "a b", "x'y", "$(touch " .. canary .. ")" })
eq(rc, 0, "fake CLI exit")
eq(args_of(0), "--server 127.0.0.1:1 --deadline_ms 5000 a b x'y $(touch " ..
   canary .. ")", "arguments passed as words")
eq(io.open(canary), nil, "nothing ran in a shell")

-- A job that fits: accepted, the CLI asked at 2 x L4.
local fits = '{"headroom": 1.15, "targets": [{"name": "L4", "memoryGb": 24, ' ..
  '"verdicts": ["FITS"], "batches": [{"batch": 1, "figures": {"deviceGb": 14.89, ' ..
  '"deviceUpperGb": 19.51}}]}]}'
reset()
put("answer.n", fits)
local job = { comment = "headroom: --model llama-3.2-1b --batch 1 --parallel fsdp-full",
              tres_per_node = "gres:gpu:l4:2", min_nodes = 1, name = "ok", work_dir = "/w" }
eq(M.judge(job), 0, "FITS accepted")
eq(args_of(0), "--server 127.0.0.1:1 --deadline_ms 5000 fit --model llama-3.2-1b " ..
   "--batch 1 --parallel fsdp-full --gpu L4 --gpus 2 --json", "the fit call")
eq(args_of(1), nil, "no hint call when accepted")

-- A job that does not fit 1 x L4: refused with the peak, the card and the
-- smallest count (2 x L4, fsdp-full) and another type (1 x H100).
-- 37.26 x 1.15 = 42.849 -> "42.85".
local dnf = '{"headroom": 1.15, "targets": [{"name": "L4", "memoryGb": 24, ' ..
  '"verdicts": ["FITS", "DOES_NOT_FIT"], "batches": [{"batch": 1, "figures": {}}, ' ..
  '{"batch": 2, "figures": {"deviceGb": 28.23, "deviceUpperGb": 37.26}}]}]}'
local auto = '{"minGpus": [' ..
  '{"target": "L4", "strategies": [{"strategy": "ddp", "gpusFits": 0}, ' ..
  '{"strategy": "fsdp-full", "gpusFits": 2, "gpusNotDoesNotFit": 2}]}, ' ..
  '{"target": "H100", "strategies": [{"strategy": "fsdp-full", "gpusFits": 1}]}, ' ..
  '{"target": "RTX PRO 6000 Blackwell", "strategies": [{"strategy": "ddp", "gpusFits": 0}]}]}'
reset()
put("answer.n", dnf)
put("answer.auto", auto)
job.tres_per_node = "gres:gpu:l4:1"
local code, msg = M.judge(job)
eq(code, -1, "DOES_NOT_FIT refused")
eq(msg, "Headroom: the job does not fit 1 x l4 (L4, 24.00 GB): batch 2 needs " ..
   "28.23 GB per GPU on the device, upper bound 37.26 GB x headroom 1.15 = " ..
   "42.85 GB: DOES_NOT_FIT; the smallest count that fits: 2 x L4 with " ..
   "--parallel fsdp-full (--gres=gpu:l4:2); or another type: " ..
   "--gres=gpu:h100:1", "the refusal")
eq(args_of(1), "--server 127.0.0.1:1 --deadline_ms 5000 fit --model llama-3.2-1b " ..
   "--batch 1 --parallel fsdp-full --gpu L4,H100,RTX PRO 6000 Blackwell --gpus auto --json",
   "the hint call asks every type in headroom.conf")

-- Two nodes of 2 x L4 each: the planner is asked for 4 GPUs, 2 per node.
reset()
put("answer.n", fits)
eq(M.judge({ comment = "headroom: --model gpt2 --batch 1", name = "mn",
             tres_per_node = "gres:gpu:l4:2", min_nodes = 2 }), 0, "two nodes")
eq(args_of(0), "--server 127.0.0.1:1 --deadline_ms 5000 fit --model gpt2 --batch 1 " ..
   "--gpus_per_node 2 --gpu L4 --gpus 4 --json", "two nodes: 4 GPUs, 2 per node")

-- BORDERLINE: refused unless allow_borderline.
local border = fits:gsub('"FITS"', '"BORDERLINE"')
reset()
put("answer.n", border)
code, msg = M.judge(job)
eq(code, -1, "BORDERLINE refused by default")
has(msg, "Headroom: the job may not fit (BORDERLINE is refused: headroom.conf " ..
    "has allow_borderline = false) 1 x l4", "BORDERLINE message")
put("headroom.conf", "cli = " .. fake .. "\nallow_borderline = true\ngpu_type.l4 = L4\n")
reset()
put("answer.n", border)
eq(M.judge(job), 0, "BORDERLINE accepted when allowed")

-- The planner unreachable (exit 3) or too slow (timeout's 124): fail-open,
-- logged; with fail_open = false, refused.
put("headroom.conf", "cli = " .. fake .. "\ngpu_type.l4 = L4\n")
for _, code3 in ipairs({ 3, 124 }) do
  reset()
  put("rc", tostring(code3))
  put("stderr", "headroom: cannot reach the planner")
  eq(M.judge(job), 0, "fail-open on exit " .. code3)
  has(logs[#logs], "event=fail_open", "fail-open logged on exit " .. code3)
end
put("headroom.conf", "cli = " .. fake .. "\ntoken_file = " .. tmp .. "/no-token\ngpu_type.l4 = L4\n")
reset()
put("answer.n", dnf)
eq(M.judge(job), 0, "an unreadable token_file fails open")
has(logs[#logs], "event=fail_open job ok uid nil: headroom.conf's token_file " .. tmp ..
    "/no-token cannot be read", "token_file named")
eq(args_of(0), nil, "no CLI call without the token")
put("token", "s3cret\n")
put("headroom.conf", "cli = " .. fake .. "\ntoken_file = " .. tmp .. "/token\ngpu_type.l4 = L4\n")
reset()
put("answer.n", fits)
eq(M.judge(job), 0, "a readable token_file")
eq(args_of(0):find("s3cret", 1, true), nil, "the token is not an argument")
local seen = io.open(tmp .. "/token.seen"):read("*a")
eq(seen, "s3cret", "the token reaches the CLI as HEADROOM_TOKEN")
put("headroom.conf", "cli = " .. fake .. "\nfail_open = false\ngpu_type.l4 = L4\n")
reset()
put("rc", "3")
code, msg = M.judge(job)
eq(code, -1, "fail_open = false refuses")
has(msg, "headroom.conf says fail_open = false", "fail-closed message")

-- A description the CLI refuses (exit 2): refused with the CLI's words.
put("headroom.conf", "cli = " .. fake .. "\ngpu_type.l4 = L4\n")
reset()
put("rc", "2")
put("stderr", "headroom: --model: template 'nosuch' is not in the catalog")
code, msg = M.judge(job)
eq(code, -1, "exit 2 refused")
eq(msg, "the Headroom description (--comment) was refused: headroom: --model: " ..
   "template 'nosuch' is not in the catalog", "the CLI's message")

-- No description: untouched, the CLI never runs. A description without a
-- GPU: refused. A type not in headroom.conf: passes, logged.
reset()
eq(M.judge({ comment = "nightly", tres_per_node = "gres:gpu:l4:1" }), 0, "no description")
eq(args_of(0), nil, "no CLI call without a description")
code, msg = M.judge({ comment = "headroom: --model gpt2 --batch 1" })
eq(code, -1, "no GPU refused")
has(msg, "asks for no GPU; add --gres=gpu:TYPE:N or --gpus=TYPE:N (types: l4)", "no GPU message")
eq(M.judge({ comment = "headroom: --model gpt2", tres_per_node = "gres:gpu:a10:1" }), 0,
   "unknown type passes")
has(logs[#logs], 'GPU type "a10" is not in headroom.conf', "unknown type logged")
eq(args_of(0), nil, "no CLI call for an unknown type")

-- headroom.conf errors name the file, line and allowed values.
put("bad.conf", "planer = x\n")
local c, cerr = M.read_conf(tmp .. "/bad.conf")
eq(c, nil, "unknown key")
has(cerr, 'bad.conf:1: unknown key "planer"; allowed: gpu_type.GRES_TYPE, planner', "unknown key message")
put("bad.conf", "fail_open = yes\n")
c, cerr = M.read_conf(tmp .. "/bad.conf")
has(cerr, 'fail_open = "yes"; allowed: true, false', "bad bool message")

os.execute("rm -rf " .. M.shell_quote(tmp))
print(string.format("job_submit_test: %d checks, %d failed", checks, failures))
os.exit(failures == 0 and 0 or 1)
