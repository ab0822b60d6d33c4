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
PIPS=(numpy pytest pybind11 scikit-build-core matplotlib)  # matplotlib: `make bench` plots

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
# torch: a test and benchmark dependency (the oracle for tensor semantics,
# the peer in benchmarks), never needed by `import kiln`. 2.13.0 CPU is the
# wheel this machine kind keeps on disk; a plain `torch` would fetch a CUDA build.
if ! "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('torch').split('+')[0] != '2.13.0')" 2>/dev/null; then
  echo "install: pip install torch==2.13.0"
  "$PY" -m pip install -q torch==2.13.0
fi
echo "install: all dependencies present"
