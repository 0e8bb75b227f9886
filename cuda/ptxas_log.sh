#!/bin/sh
# CUDA compiler launcher (CMake CUDA_COMPILER_LAUNCHER): runs the nvcc command line it is given,
# keeps nvcc's stderr -- the -Xptxas -v report of registers and spills per kernel -- in
# <object>.ptxas.log next to the object (tests/cuemu_spills.py reads it), and passes every other
# message (warnings, errors) through to the build output.
out=
prev=
for a in "$@"; do
    [ "$prev" = "-o" ] && out=$a
    prev=$a
done
log="${out:-nvcc-output}.ptxas.log"
"$@" 2>"$log.tmp"
rc=$?
grep -v -e '^ptxas info' -e '^    [0-9]* bytes stack frame' "$log.tmp" >&2
mv -f "$log.tmp" "$log"
exit $rc
