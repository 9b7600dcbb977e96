"""The torch harness of headroom-worker's `torch` probe executor: builds a
Headroom model spec in PyTorch and measures its training step
(worker/harness/README.md).

Modules, from the input to the command line:
  proto        the generated headroom.v1 modules (the one import of them)
  model_spec   a ModelSpec read and checked as the planner's ValidateLayer
  setups       a TrainingSetup read and checked as ValidateSetup; ApplyFreeze
  models       the torch modules of each layer copy: freeze, LoRA, QLoRA
  wiring       which tensor each layer reads, decided from shapes
  program      modules + wiring: one training step's forward and loss
  optimizers   the setup's optimizer
  phases       one batch measured: warm-up and timed steps, peaks, energy
  distributed  the same under torch.distributed (DDP, FSDP)
  energy       NVML's energy counter; the generation energy probe
  records      the JSON lines printed and the record behind a result
  flags, cli   the command line and what each command does
  errors       SpecError (bad input) and its exit code
  torch_support  what this torch can do (version checks, 1.13 vs 2.x calls)

errors, records, proto, model_spec, setups, wiring and flags import without
torch; the rest need it. Nothing is imported here.
"""
