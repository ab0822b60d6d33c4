# Sourced by run.sh and coverage.sh (ROOT set): where the KBC text targets
# start from, every program of the repository. tests/corpus/fuzz holds the
# inputs the fuzzers once failed on, as they wrote them (no expectations:
# the targets' own invariants judge them), so every run replays them first.
kbc_seeds=("$ROOT/tests/corpus/vm" "$ROOT/tests/corpus/tracer" "$ROOT/tests/corpus/malformed" "$ROOT/tests/corpus/fuzz" "$ROOT/examples")
