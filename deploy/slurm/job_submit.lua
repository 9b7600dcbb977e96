--[[
Headroom's admission filter for Slurm (the job_submit/lua plugin): a job that
describes itself to Headroom is asked about before it is queued, and refused
when it does not fit the GPUs it requests, naming the smallest count, or a GPU
type from headroom.conf, that fits. Jobs without a description pass untouched.
When the planner cannot be reached or does not answer in time, jobs pass
(fail-open, logged), as the scheduler extender does.

Install: this file and headroom.conf beside slurm.conf, JobSubmitPlugins=lua
(deploy/slurm/README.md). The plugin is Slurm's, read at the tag Debian 12
ships (22.05.8):

  SchedMD/slurm src/plugins/job_submit/lua/job_submit_lua.c
    @ d525b6872a106d32916b33a8738f12510ec7cf04 (tag slurm-22-05-8-1):
    - slurm_job_submit(job_desc, part_list, submit_uid) and
      slurm_job_modify(job_desc, job_rec, part_list, modify_uid) must both
      exist (req_fxns); each returns a number, slurm.SUCCESS or an error code
      (job_submit(): rc = lua_tonumber(L, -1)).
    - job_desc fields read here: comment, script, work_dir, name, user_id,
      min_nodes, num_tasks, tres_per_job, tres_per_node, tres_per_task,
      tres_per_socket (_get_job_req_field).
    - slurm.log_user(fmt, ...) is slurm.user_msg(string.format(fmt, ...));
      job_submit() hands the text to the submitting client as its error
      message; job_modify() discards it ("Use of log.user() in job_modify is
      not supported"), so a refused modification is only logged.
    - The script runs under one global lua_lock; while it waits for the
      planner no other job is submitted, hence the short timeout_s.
  SchedMD/slurm src/lua/slurm_lua.c @ the same commit: slurm.SUCCESS,
    slurm.ERROR, slurm.ESLURM_INVALID_*, slurm.NO_VAL, slurm.log_info and
    slurm.log_error; luaL_openlibs, so io.popen and os are available; the
    job record (job_rec) has comment and gres (its tres_per_node) but no
    tres_per_job, tres_per_task or work_dir.
  SchedMD/slurm src/common/slurm_opt.c (slurm_opt_create_job_desc) and
    src/common/proc_args.c (xfmt_tres) @ the same commit: --gpus becomes
    tres_per_job, --gpus-per-node and --gres tres_per_node, --gpus-per-task
    tres_per_task, each entry "gres:gpu[:TYPE]:COUNT", comma-separated
    (gres_prepend_tres_type in src/common/gres.c adds "gres:" to --gres).
  SchedMD/slurm src/sbatch/opt.c (_opt_batch_script) @ the same commit:
    sbatch stops reading #SBATCH lines at the script's first line that is
    not a comment; #HEADROOM lines are read the same way.

Lua 5.1 (Debian's job_submit_lua.so links liblua5.1).
--]]

local M = {}

-- headroom.conf sits beside this file (the plugin loads the script from
-- slurm.conf's directory).
do
  local src = debug.getinfo(1, "S").source or ""
  local dir = src:match("^@(.*)/[^/]*$") or "."
  M.conf_path = dir .. "/headroom.conf"
end

-- What a user's description may hold: every character outside this set is
-- refused before anything reaches a shell.
M.ALLOWED = "A-Za-z0-9._,/:=+-"
local ALLOWED_PATTERN = "^[A-Za-z0-9._,/:=+%-]+$"
local MAX_DESCRIPTION_CHARS = 2000
local MAX_TOKENS = 64

-- Flags the filter sets itself, or that would change who the CLI talks to or
-- what the planner does: a description may not carry them. Keys are flag
-- names with dashes as underscores, as the CLI accepts both.
local FORBIDDEN_FLAGS = {
  gpu = "the GPU type comes from the job's --gres=gpu:TYPE:N or --gpus=TYPE:N",
  gpus = "the GPU count comes from the job's --gres / --gpus",
  json = "the filter sets it",
  server = "headroom.conf's planner sets it",
  token = "headroom.conf's token_file sets it",
  tls_ca = "headroom.conf sets it",
  tls_cert = "headroom.conf sets it",
  tls_key = "headroom.conf sets it",
  deadline_ms = "headroom.conf's timeout_s sets it",
  models_dir = "the planner's catalog answers",
  learn = "a submission does not queue probes",
  include_simulated = "headroom.conf's include_simulated sets it",
  help = "not a question",
  h = "not a question",
  explain = "the filter reads the verdict only",
}

-- Flags whose value is a file the CLI reads on this (the controller's) host.
local FILE_FLAGS = {
  job = true, deepspeed = true, accelerate_config = true, onnx = true,
}

local function log_info(fmt, ...)
  slurm.log_info("headroom: " .. fmt, ...)
end

local function log_error(fmt, ...)
  slurm.log_error("headroom: " .. fmt, ...)
end

local function trim(s)
  return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

-- headroom.conf: "key = value" lines, # comments. Unknown keys are an error
-- (named with the line), so a typo does not silently change the policy.
local CONF_DEFAULTS = {
  planner = "127.0.0.1:50051",
  cli = "/usr/local/bin/headroom",
  timeout_s = "5",
  fail_open = "true",
  allow_borderline = "false",
  include_simulated = "false",
  default_gpu_type = "",
  tls_ca = "",
  token_file = "",
  job_dirs = "",
}

local function parse_bool(key, v)
  if v == "true" then return true end
  if v == "false" then return false end
  return nil, string.format("%s: %s = %q; allowed: true, false", M.conf_path,
                            key, v)
end

function M.read_conf(path)
  local conf = { gpu_type = {}, gpu_type_order = {} }
  for k, v in pairs(CONF_DEFAULTS) do conf[k] = v end
  local f, err = io.open(path, "r")
  if not f then return nil, "cannot read " .. tostring(err) end
  local lineno = 0
  for line in f:lines() do
    lineno = lineno + 1
    line = trim(line:gsub("#.*$", ""))
    if line ~= "" then
      local key, value = line:match("^([%w_.%-]+)%s*=%s*(.-)$")
      if not key then
        f:close()
        return nil, string.format("%s:%d: expected key = value", path, lineno)
      end
      local gres = key:match("^gpu_type%.(.+)$")
      if gres then
        if not conf.gpu_type[gres] then
          table.insert(conf.gpu_type_order, gres)
        end
        conf.gpu_type[gres] = value
      elseif CONF_DEFAULTS[key] ~= nil then
        conf[key] = value
      else
        f:close()
        return nil, string.format(
          "%s:%d: unknown key %q; allowed: gpu_type.GRES_TYPE, planner, cli, " ..
          "timeout_s, fail_open, allow_borderline, include_simulated, " ..
          "default_gpu_type, tls_ca, token_file, job_dirs", path, lineno, key)
      end
    end
  end
  f:close()
  for _, key in ipairs({ "fail_open", "allow_borderline", "include_simulated" }) do
    local b, berr = parse_bool(key, conf[key])
    if b == nil then return nil, berr end
    conf[key] = b
  end
  local t = tonumber(conf.timeout_s)
  if not t or t <= 0 or t > 60 then
    return nil, string.format("%s: timeout_s = %q; allowed: a number of " ..
                              "seconds, 0 < t <= 60", path, conf.timeout_s)
  end
  conf.timeout_s = t
  local dirs = {}
  for d in conf.job_dirs:gmatch("[^,]+") do
    d = trim(d):gsub("/+$", "")
    if d ~= "" then table.insert(dirs, d) end
  end
  conf.job_dirs = dirs
  return conf
end

-- One shell word: single quotes, a ' inside closed and reopened.
function M.shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- A minimal JSON reader for the CLI's --json answer (objects, arrays,
-- strings, numbers, true, false, null). Returns value or nil, error.
local function json_decode(text)
  local pos = 1
  local value
  local function err(what)
    error({ json = string.format("%s at byte %d", what, pos) })
  end
  local function skip()
    pos = text:find("[^ \t\r\n]", pos) or (#text + 1)
  end
  local escapes = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b",
                    f = "\f", n = "\n", r = "\r", t = "\t" }
  local function str()
    local out = {}
    pos = pos + 1
    while true do
      local c = text:sub(pos, pos)
      if c == "" then err("unterminated string") end
      if c == '"' then pos = pos + 1; break end
      if c == "\\" then
        local e = text:sub(pos + 1, pos + 1)
        if e == "u" then
          local code = tonumber(text:sub(pos + 2, pos + 5), 16)
          if not code then err("bad \\u escape") end
          table.insert(out, code < 128 and string.char(code) or "?")
          pos = pos + 6
        elseif escapes[e] then
          table.insert(out, escapes[e])
          pos = pos + 2
        else
          err("bad escape")
        end
      else
        table.insert(out, c)
        pos = pos + 1
      end
    end
    return table.concat(out)
  end
  function value()
    skip()
    local c = text:sub(pos, pos)
    if c == "{" then
      local obj = {}
      pos = pos + 1
      skip()
      if text:sub(pos, pos) == "}" then pos = pos + 1; return obj end
      while true do
        skip()
        if text:sub(pos, pos) ~= '"' then err("expected a key") end
        local k = str()
        skip()
        if text:sub(pos, pos) ~= ":" then err("expected ':'") end
        pos = pos + 1
        obj[k] = value()
        skip()
        local d = text:sub(pos, pos)
        pos = pos + 1
        if d == "}" then return obj end
        if d ~= "," then err("expected ',' or '}'") end
      end
    elseif c == "[" then
      local arr = {}
      pos = pos + 1
      skip()
      if text:sub(pos, pos) == "]" then pos = pos + 1; return arr end
      while true do
        table.insert(arr, value())
        skip()
        local d = text:sub(pos, pos)
        pos = pos + 1
        if d == "]" then return arr end
        if d ~= "," then err("expected ',' or ']'") end
      end
    elseif c == '"' then
      return str()
    elseif text:sub(pos, pos + 3) == "true" then
      pos = pos + 4; return true
    elseif text:sub(pos, pos + 4) == "false" then
      pos = pos + 5; return false
    elseif text:sub(pos, pos + 3) == "null" then
      pos = pos + 4; return nil
    else
      local num = text:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
      if not num or num == "" then err("unexpected character") end
      pos = pos + #num
      return tonumber(num)
    end
  end
  local ok, result = pcall(function()
    local v = value()
    skip()
    if pos <= #text then err("trailing text") end
    return v
  end)
  if ok then return result end
  if type(result) == "table" and result.json then return nil, result.json end
  return nil, tostring(result)
end
M.json_decode = json_decode

-- The job's Headroom description: the comment "headroom: ARGS", else the
-- batch script's "#HEADROOM ARGS" lines before its first command (as sbatch
-- reads #SBATCH). Returns the argument text and where it came from, or nil.
function M.description(comment, script)
  if comment then
    local args = comment:match("^%s*[Hh][Ee][Aa][Dd][Rr][Oo][Oo][Mm]:(.*)$")
    if args then return trim(args), "--comment" end
  end
  if script then
    local parts = {}
    for line in (script .. "\n"):gmatch("([^\n]*)\n") do
      local args = line:match("^#HEADROOM%s(.*)$") or
                   line:match("^#HEADROOM$")
      if args then
        table.insert(parts, trim(args))
      elseif line:match("^%s*[^%s#]") then
        break
      end
    end
    if #parts > 0 then return trim(table.concat(parts, " ")), "#HEADROOM" end
  end
  return nil
end

local function path_allowed(path, dirs)
  if #dirs == 0 then return true end
  for _, d in ipairs(dirs) do
    if path:sub(1, #d + 1) == d .. "/" then return true end
  end
  return false
end

-- Splits and checks the description: every word inside the allowed
-- characters, no forbidden flag, file paths resolved against the job's
-- work_dir and, when headroom.conf lists job_dirs, inside one of them.
-- Returns { args = {...}, flags = {name = value} } or nil, message.
function M.parse_description(text, where, work_dir, job_dirs)
  job_dirs = job_dirs or {}
  if #text > MAX_DESCRIPTION_CHARS then
    return nil, string.format("the Headroom description (%s) is %d " ..
                              "characters; at most %d", where, #text,
                              MAX_DESCRIPTION_CHARS)
  end
  local words = {}
  for w in text:gmatch("%S+") do table.insert(words, w) end
  if #words == 0 then
    return nil, string.format("the Headroom description (%s) is empty; " ..
                              "e.g. headroom: --model llama-3.1-8b --batch 4",
                              where)
  end
  if #words > MAX_TOKENS then
    return nil, string.format("the Headroom description (%s) has %d words; " ..
                              "at most %d", where, #words, MAX_TOKENS)
  end
  -- "--name=value" is read as "--name value", so every value is checked
  -- the same way.
  local split = {}
  for _, w in ipairs(words) do
    local name, value = w:match("^(%-%-[^=]*)=(.*)$")
    if name then
      table.insert(split, name)
      if value ~= "" then table.insert(split, value) end
    else
      table.insert(split, w)
    end
  end
  local args, flags = {}, {}
  local pending -- the flag whose value is the next word
  for _, w in ipairs(split) do
    if not w:match(ALLOWED_PATTERN) then
      return nil, string.format("the Headroom description (%s): %q has a " ..
                                "character outside %s", where, w, M.ALLOWED)
    end
    if w:sub(1, 2) == "--" then
      local name = w:sub(3):gsub("-", "_")
      if name == "" then
        return nil, string.format("the Headroom description (%s): %q is " ..
                                  "not a flag", where, w)
      end
      if FORBIDDEN_FLAGS[name] then
        return nil, string.format("the Headroom description (%s) may not " ..
                                  "set --%s: %s", where, name,
                                  FORBIDDEN_FLAGS[name])
      end
      flags[name] = true
      pending = name
      table.insert(args, "--" .. name)
    elseif w:sub(1, 1) == "-" then
      return nil, string.format("the Headroom description (%s): %q: flags " ..
                                "are --name VALUE", where, w)
    else
      local value = w
      local is_file = pending and (FILE_FLAGS[pending] or
        (pending == "model" and (w:match("%.json$") or w:match("%.onnx$") or
                                 w:sub(1, 1) == "/" or w:sub(1, 2) == "./")))
      if is_file then
        if ("/" .. w .. "/"):find("/%.%./") then
          return nil, string.format("the Headroom description (%s): --%s " ..
                                    "%s: '..' is not allowed in a path",
                                    where, pending, w)
        end
        if w:sub(1, 1) ~= "/" then
          if not work_dir or work_dir == "" then
            return nil, string.format("the Headroom description (%s): " ..
                                      "--%s %s is relative and the job has " ..
                                      "no working directory", where, pending,
                                      w), "no_work_dir"
          end
          value = work_dir:gsub("/+$", "") .. "/" .. w:gsub("^%./", "")
        end
        if not path_allowed(value, job_dirs) then
          return nil, string.format("the Headroom description (%s): --%s " ..
                                    "%s is outside the directories " ..
                                    "headroom.conf allows (job_dirs: %s)",
                                    where, pending, value,
                                    table.concat(job_dirs, ","))
        end
      end
      if pending then flags[pending] = value end
      table.insert(args, value)
      pending = nil
    end
  end
  return { args = args, flags = flags }
end

local function count_of(text)
  if not text or not text:match("^%d+$") then return nil end
  return tonumber(text)
end

-- The GPUs one tres_per_* string asks for: "gres:gpu[:TYPE][:COUNT]",
-- comma-separated with other GRES. Returns type (or ""), count; nil when no
-- GPU is named; false, why when it cannot be read.
function M.parse_gpu_tres(tres)
  if not tres or tres == "" then return nil end
  local found_type, found_count
  for entry in tres:gmatch("[^,]+") do
    local e = entry:gsub("^gres[:/]", ""):gsub("%(.*%)$", "")
    local parts = {}
    for p in (e .. ":"):gmatch("([^:]*):") do table.insert(parts, p) end
    if parts[1] == "gpu" then
      if found_count then
        return false, string.format("%q names GPUs twice", tres)
      end
      local gtype, count = "", 1
      if #parts == 2 then
        if count_of(parts[2]) then count = count_of(parts[2])
        else gtype = parts[2] end
      elseif #parts == 3 then
        gtype, count = parts[2], count_of(parts[3])
      elseif #parts > 3 then
        count = nil
      end
      if not count then
        return false, string.format("%q: a GPU count the filter cannot read",
                                    tres)
      end
      found_type, found_count = gtype, count
    end
  end
  if not found_count then return nil end
  return found_type, found_count
end

local function unset(n)
  return n == nil or n == 0 or n >= 0xfffffffe
end

-- The job's GPU request from its tres_per_* fields: { type, gpus (in all),
-- per_node (or nil) }, nil when it asks for no GPU, or false, why.
function M.gpu_request(job)
  local request
  local fields = {
    { "tres_per_job", 1 },
    { "tres_per_node", unset(job.min_nodes) and 1 or job.min_nodes },
    { "tres_per_task", unset(job.num_tasks) and 1 or job.num_tasks },
  }
  for _, f in ipairs(fields) do
    local gtype, count = M.parse_gpu_tres(job[f[1]])
    if gtype == false then return false, f[1] .. " " .. count end
    if gtype then
      if request then
        return false, "GPUs asked for in several ways (--gpus, " ..
                      "--gpus-per-node / --gres, --gpus-per-task)"
      end
      request = { type = gtype, gpus = count * f[2] }
      if f[1] == "tres_per_node" and f[2] > 1 then request.per_node = count end
    end
  end
  if not request then
    local gtype = M.parse_gpu_tres(job.tres_per_socket)
    if gtype ~= nil then
      return false, "--gpus-per-socket: the GPU count depends on the " ..
                    "sockets the job gets"
    end
  end
  return request
end

-- Runs the CLI with argv (already checked words); returns exit code,
-- stdout, stderr. Every word is quoted; the CLI is bounded by timeout(1).
function M.run_cli(conf, argv)
  local words = { "timeout", "-k", "2", string.format("%g", conf.timeout_s),
                  conf.cli, "--server", conf.planner, "--deadline_ms",
                  string.format("%d", conf.timeout_s * 1000) }
  if conf.tls_ca ~= "" then
    table.insert(words, "--tls_ca")
    table.insert(words, conf.tls_ca)
  end
  for _, a in ipairs(argv) do table.insert(words, a) end
  local quoted = {}
  for i, w in ipairs(words) do quoted[i] = M.shell_quote(w) end
  local errfile = os.tmpname()
  local cmd = table.concat(quoted, " ") .. " 2>" .. M.shell_quote(errfile) ..
              "; rc=$?; echo; echo HEADROOM_RC=$rc"
  if conf.token_file ~= "" then
    local tf = io.open(conf.token_file, "r")
    if not tf then
      return -1, "", "headroom.conf's token_file " .. conf.token_file ..
                     " cannot be read"
    end
    tf:close()
    cmd = "HEADROOM_TOKEN=\"$(cat " .. M.shell_quote(conf.token_file) ..
          ")\" && export HEADROOM_TOKEN && " .. cmd
  end
  local p = io.popen(cmd, "r")
  local out = p and p:read("*a") or ""
  if p then p:close() end
  local ef = io.open(errfile, "r")
  local err = ef and ef:read("*a") or ""
  if ef then ef:close() end
  os.remove(errfile)
  local body, rc = out:match("^(.-)\n?\nHEADROOM_RC=(%d+)%s*$")
  return tonumber(rc) or -1, body or out, trim(err):sub(1, 1000)
end

local VERDICT_RANK = { FITS = 0, BORDERLINE = 1, DOES_NOT_FIT = 2 }

-- The worst verdict over the answer's batches on its one target, with the
-- batch and figures that decided it.
function M.worst_verdict(answer)
  local target = answer.targets and answer.targets[1]
  if not target or not target.verdicts or #target.verdicts == 0 then
    return nil
  end
  local worst = 1
  for i, v in ipairs(target.verdicts) do
    if (VERDICT_RANK[v] or 2) > (VERDICT_RANK[target.verdicts[worst]] or 2) then
      worst = i
    end
  end
  local batch = target.batches and target.batches[worst] or {}
  local fig = batch.figures or {}
  return {
    verdict = target.verdicts[worst],
    batch = batch.batch,
    card = target.name,
    card_gb = target.memoryGb or 0,
    device_gb = fig.deviceGb or 0,
    device_upper_gb = fig.deviceUpperGb or 0,
    headroom = answer.headroom or 0,
  }
end

local function accepted(verdict, conf)
  return verdict == "FITS" or (verdict == "BORDERLINE" and conf.allow_borderline)
end

-- The smallest count per GPU type from a --gpus auto answer: for each target,
-- the cheapest strategy's count (FITS, or not DOES_NOT_FIT where BORDERLINE is
-- accepted); 0 when none up to the CLI's limit.
function M.smallest_counts(answer, conf)
  local out = {}
  for _, t in ipairs(answer.minGpus or {}) do
    local best
    for _, s in ipairs(t.strategies or {}) do
      local n = conf.allow_borderline and s.gpusNotDoesNotFit or s.gpusFits
      if n and n > 0 and (not best or n < best.gpus) then
        best = { gpus = n, strategy = s.strategy }
      end
    end
    out[t.target] = best or { gpus = 0 }
  end
  return out
end

-- The rejection's next step: the smallest count of the requested type, and
-- the other types in headroom.conf with their smallest counts.
function M.hint(conf, base_args, headroom_gpu, gres_type)
  local names, seen = { headroom_gpu }, { [headroom_gpu] = true }
  for _, g in ipairs(conf.gpu_type_order) do
    local name = conf.gpu_type[g]
    if not seen[name] then table.insert(names, name); seen[name] = true end
  end
  local argv = { "fit" }
  for _, a in ipairs(base_args) do table.insert(argv, a) end
  if conf.include_simulated then table.insert(argv, "--include_simulated") end
  for _, a in ipairs({ "--gpu", table.concat(names, ","), "--gpus", "auto",
                       "--json" }) do
    table.insert(argv, a)
  end
  local rc, out, err = M.run_cli(conf, argv)
  if rc ~= 0 then
    log_info("no hint: the --gpus auto call exited %d: %s", rc, err)
    return ""
  end
  local answer = json_decode(out)
  if not answer then return "" end
  local counts = M.smallest_counts(answer, conf)
  local parts = {}
  local own = counts[headroom_gpu]
  if own and own.gpus == 1 then
    table.insert(parts, string.format("it fits 1 x %s as described " ..
                                      "(--gres=gpu:%s:1)", headroom_gpu,
                                      gres_type ~= "" and gres_type or
                                      headroom_gpu))
  elseif own and own.gpus > 0 then
    local label = gres_type ~= "" and gres_type or headroom_gpu
    table.insert(parts, string.format(
      "the smallest count that fits: %d x %s with --parallel %s " ..
      "(--gres=gpu:%s:%d)", own.gpus, headroom_gpu, own.strategy, label,
      own.gpus))
  else
    table.insert(parts, string.format("no count of %s up to 512 fits",
                                      headroom_gpu))
  end
  local others = {}
  for _, g in ipairs(conf.gpu_type_order) do
    local c = counts[conf.gpu_type[g]]
    if g ~= gres_type and conf.gpu_type[g] ~= headroom_gpu and c and
       c.gpus > 0 then
      table.insert(others, { gres = g, gpus = c.gpus, strategy = c.strategy })
    end
  end
  table.sort(others, function(a, b) return a.gpus < b.gpus end)
  if #others > 0 then
    local list = {}
    for i = 1, math.min(3, #others) do
      local o = others[i]
      table.insert(list, o.gpus == 1 and
                   string.format("--gres=gpu:%s:1", o.gres) or
                   string.format("--gres=gpu:%s:%d (--parallel %s)", o.gres,
                                 o.gpus, o.strategy))
    end
    table.insert(parts, "or another type: " .. table.concat(list, ", "))
  end
  return "; " .. table.concat(parts, "; ")
end

-- The GPUs the job asks for, as a GRES type and the Headroom GPU it maps to.
-- Returns request, gres_type, headroom_gpu; or nil and, where the job is
-- refused, the message (nil: it passes unchecked, logged).
local function requested_gpus(job, conf, where)
  local request, rerr = M.gpu_request(job)
  if request == false then
    log_info("job %s: %s; passes unchecked", tostring(job.name), rerr)
    return nil
  end
  if not request and job.modify then
    log_info("job %s: its GPU request is not in the job record (a " ..
             "modification); passes unchecked", tostring(job.name))
    return nil
  end
  if not request then
    return nil, string.format(
      "the job describes itself to Headroom (%s) but asks for no GPU; add " ..
      "--gres=gpu:TYPE:N or --gpus=TYPE:N (types: %s)", where,
      table.concat(conf.gpu_type_order, ", "))
  end
  local gres_type = request.type ~= "" and request.type or
                    conf.default_gpu_type
  if gres_type == "" then
    log_info("job %s: GPUs without a type and no default_gpu_type in " ..
             "headroom.conf; passes unchecked", tostring(job.name))
    return nil
  end
  if not conf.gpu_type[gres_type] then
    log_info("job %s: GPU type %q is not in headroom.conf (gpu_type.%s); " ..
             "passes unchecked", tostring(job.name), gres_type, gres_type)
    return nil
  end
  return request, gres_type, conf.gpu_type[gres_type]
end

-- The description's words for the planner, with --gpus_per_node from a
-- multi-node --gres / --gpus-per-node unless the description sets it.
local function setup_args(desc, request)
  local args = {}
  for _, a in ipairs(desc.args) do table.insert(args, a) end
  if request.per_node and not desc.flags.gpus_per_node then
    table.insert(args, "--gpus_per_node")
    table.insert(args, tostring(request.per_node))
  end
  return args
end

-- Asks the planner for the verdict at the requested type and count.
-- Returns the worst verdict, or nil, the CLI's exit code and why.
local function ask_fit(conf, args, headroom_gpu, gpus)
  local argv = { "fit" }
  for _, a in ipairs(args) do table.insert(argv, a) end
  if conf.include_simulated then table.insert(argv, "--include_simulated") end
  for _, a in ipairs({ "--gpu", headroom_gpu, "--gpus", tostring(gpus),
                       "--json" }) do
    table.insert(argv, a)
  end
  local rc, out, err = M.run_cli(conf, argv)
  if rc == 2 then return nil, rc, err end
  local answer, jerr
  if rc == 0 then answer, jerr = json_decode(out) end
  local verdict = answer and M.worst_verdict(answer)
  if verdict then return verdict end
  if rc == 0 then
    return nil, rc, "an answer it could not read: " ..
                    tostring(jerr or "no verdict")
  end
  if rc == 124 or rc == 137 then
    return nil, rc, string.format("no answer within timeout_s = %g",
                                  conf.timeout_s)
  end
  if rc == -1 then return nil, rc, err end
  return nil, rc, string.format("the CLI exited %d: %s", rc, err)
end

-- The decision for one job. Returns slurm.SUCCESS or an error code, and the
-- message for the user (nil when there is nothing to say).
function M.judge(job)
  local text, where = M.description(job.comment, job.script)
  if not text then return slurm.SUCCESS end
  local conf, cerr = M.read_conf(M.conf_path)
  if not conf then
    log_error("headroom.conf: %s; the job passes unchecked", cerr)
    return slurm.SUCCESS
  end
  local desc, derr, why = M.parse_description(text, where, job.work_dir,
                                              conf.job_dirs)
  if not desc and job.modify and why == "no_work_dir" then
    log_info("job %s: %s (a modification); passes unchecked",
             tostring(job.name), derr)
    return slurm.SUCCESS
  end
  if not desc then return slurm.ERROR, derr end
  local request, gres_type, headroom_gpu = requested_gpus(job, conf, where)
  if not request then
    if gres_type then return slurm.ERROR, gres_type end
    return slurm.SUCCESS
  end
  local args = setup_args(desc, request)
  local verdict, rc, err = ask_fit(conf, args, headroom_gpu, request.gpus)
  if rc == 2 then
    return slurm.ERROR, string.format("the Headroom description (%s) was " ..
                                      "refused: %s", where, err)
  end
  if not verdict then
    if conf.fail_open then
      log_info("event=fail_open job %s uid %s: %s; the job passes unchecked",
               tostring(job.name), tostring(job.user_id), err)
      return slurm.SUCCESS
    end
    return slurm.ERROR, "Headroom could not check the job (" .. err ..
                        ") and headroom.conf says fail_open = false"
  end
  local summary = string.format(
    "%d x %s (%s, %.2f GB): batch %s needs %.2f GB per GPU on the device, " ..
    "upper bound %.2f GB x headroom %.2f = %.2f GB: %s", request.gpus,
    gres_type, verdict.card, verdict.card_gb, tostring(verdict.batch),
    verdict.device_gb, verdict.device_upper_gb, verdict.headroom,
    verdict.device_upper_gb * verdict.headroom, verdict.verdict)
  if accepted(verdict.verdict, conf) then
    log_info("job %s uid %s accepted: %s", tostring(job.name),
             tostring(job.user_id), summary)
    return slurm.SUCCESS
  end
  local lead = verdict.verdict == "BORDERLINE" and
    "Headroom: the job may not fit (BORDERLINE is refused: headroom.conf " ..
    "has allow_borderline = false) " or "Headroom: the job does not fit "
  local msg = lead .. summary ..
              M.hint(conf, args, headroom_gpu, gres_type)
  log_info("job %s uid %s rejected: %s", tostring(job.name),
           tostring(job.user_id), msg)
  return slurm.ERROR, msg
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local job = {
    comment = job_desc.comment, script = job_desc.script,
    work_dir = job_desc.work_dir, name = job_desc.name,
    user_id = job_desc.user_id, min_nodes = job_desc.min_nodes,
    num_tasks = job_desc.num_tasks, tres_per_job = job_desc.tres_per_job,
    tres_per_node = job_desc.tres_per_node,
    tres_per_task = job_desc.tres_per_task,
    tres_per_socket = job_desc.tres_per_socket,
  }
  local rc, msg = M.judge(job)
  if msg then slurm.log_user("%s", msg) end
  return rc
end

-- A modification that changes the comment or the GPU request is judged
-- again, with the job record's values for what it leaves. The record has no
-- tres_per_job / tres_per_task or work_dir, so a job that asked for GPUs that
-- way, or whose description names a relative path, passes (logged). Slurm
-- drops user messages from job_modify, so a refusal is logged here.
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  local changes_gpus = job_desc.tres_per_job or job_desc.tres_per_node or
                       job_desc.tres_per_task
  if not job_desc.comment and not changes_gpus then return slurm.SUCCESS end
  local job = {
    modify = true,
    comment = job_desc.comment or job_rec.comment, script = job_rec.script,
    work_dir = nil, name = job_rec.name, user_id = modify_uid,
    min_nodes = job_desc.min_nodes or job_rec.min_nodes,
    num_tasks = job_desc.num_tasks,
    tres_per_job = job_desc.tres_per_job,
    tres_per_node = job_desc.tres_per_node or
                    (not changes_gpus and job_rec.gres or nil),
    tres_per_task = job_desc.tres_per_task,
  }
  local rc, msg = M.judge(job)
  if msg then
    log_info("modification of job %s by uid %s: %s", tostring(job_rec.job_id),
             tostring(modify_uid), msg)
  end
  return rc
end

-- For tests/slurm/job_submit_test.lua, which loads this file with a stub
-- slurm table.
headroom_filter = M

return slurm.SUCCESS
