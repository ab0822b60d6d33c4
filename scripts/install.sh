#!/usr/bin/env bash
# Installs every system and Python dependency kiln needs. Idempotent: on a
# ready machine it only checks (dpkg-query / pip's metadata) and exits in seconds.
set -euo pipefail

DEBS=(
  llvm-19-dev libspdlog-dev catch2 libopenmpi-dev openmpi-bin libopenblas-dev
  ninja-build ccache libcli11-dev libxxhash-dev libsleef-dev libmsgpack-cxx-dev
  zlib1g-dev libzstd-dev libedit-dev libffi-dev libxml2-dev pkgconf
  clang-19 libclang-rt-19-dev  # the fuzz targets (libFuzzer, ASan, UBSan): cmake/fuzz.cmake
)
PIPS=(numpy pytest pybind11 scikit-build-core matplotlib pillow)  # matplotlib: `make bench` plots; pillow: torchvision's

missing=()
for p in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install: apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
pmissing=()
for p in "${PIPS[@]}"; do
  "$PY" -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$p" 2>/dev/null || pmissing+=("$p")
done
if ((${#pmissing[@]})); then
  echo "install: pip install ${pmissing[*]}"
  "$PY" -m pip install -q "${pmissing[@]}"
fi
# The other CPythons kiln is built and tested for (scripts/pythons.sh):
# their test dependencies (no torch: its CPU wheel here is for 3.11 only).
for other in $(bash "$(dirname "$0")/pythons.sh"); do
  omissing=()
  for p in numpy pytest; do
    "$other" -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$p" 2>/dev/null || omissing+=("$p")
  done
  if ((${#omissing[@]})); then
    echo "install: $other -m pip install ${omissing[*]}"
    "$other" -m pip install -q --root-user-action=ignore "${omissing[@]}"
  fi
done
# torch: a test and benchmark dependency (the oracle for tensor semantics,
# the peer in benchmarks), never needed by `import kiln`. 2.13.0 CPU is the
# wheel this machine kind keeps on disk; a plain `torch` would fetch a CUDA build.
if ! "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('torch').split('+')[0] != '2.13.0')" 2>/dev/null; then
  echo "install: pip install torch==2.13.0"
  "$PY" -m pip install -q torch==2.13.0
fi

# The model zoo's libraries (tests/python/zoo/, docs/zoo.md), pinned: the
# zoo's expected.json was recorded with exactly these, and newer releases
# want a newer torch.
# - torchvision 0.28.0 is the release paired with torch 2.13.0. The
#   registry's wheel is a CUDA build: its C extension (nms, roi_align, ...)
#   does not load beside torch 2.13.0+cpu. Installed --no-deps so pip can
#   never swap torch for a CUDA build; its own dependencies (numpy, pillow)
#   are in PIPS above. The classification models are pure Python;
#   tests/python/zoo/torchvision_cpu.py makes `import torchvision` (and so
#   timm and transformers, which import it) work without the extension,
#   from the test harness, with nothing under site-packages edited.
# - timm and transformers with their dependencies, under constraints that
#   hold torch and torchvision where they are.
ZOO_TORCHVISION=torchvision==0.28.0
ZOO_PINS=(timm==1.0.31 transformers==5.24.0)
zmissing=()
for spec in "$ZOO_TORCHVISION" "${ZOO_PINS[@]}"; do
  "$PY" -c "import importlib.metadata as m, sys; n, v = sys.argv[1].split('=='); sys.exit(m.version(n).split('+')[0] != v)" \
    "$spec" 2>/dev/null || zmissing+=("$spec")
done
if ((${#zmissing[@]})); then
  echo "install: pip install ${zmissing[*]}"
  zc=$(mktemp)
  trap 'rm -f "$zc"' EXIT
  printf 'torch==2.13.0\n%s\n' "$ZOO_TORCHVISION" >"$zc"
  "$PY" -m pip install -q --no-deps -c "$zc" "$ZOO_TORCHVISION"
  "$PY" -m pip install -q -c "$zc" "${ZOO_PINS[@]}"
  tv=$("$PY" -c "import torch; print(torch.__version__)")
  if [ "$tv" != "2.13.0+cpu" ]; then
    echo "install: torch is now $tv, not 2.13.0+cpu: the zoo's libraries must not replace it" >&2
    exit 1
  fi
fi
echo "install: all dependencies present"
