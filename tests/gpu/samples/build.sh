#!/usr/bin/env bash
# tests/gpu/samples/build.sh CHECKOUT OUTDIR [NAME...]: build NVIDIA's public CUDA
# samples named in list.txt (all, or the NAMEs given) from a checkout of
# NVIDIA/cuda-samples, for tests/gpu/samples/run.sh to run natively and through vmcuda.
#
# The checkout (nothing of it is kept in this repository):
#   git clone https://github.com/NVIDIA/cuda-samples
#   git -C cuda-samples checkout c94ff366aed18c797b8a85dfaac7817b0228b420
# (the commit list.txt was written against; `git archive` of that commit does as well,
# with VMCUDA_SAMPLES_COMMIT=<commit> since the export has no .git to read it from).
#
# Built with this repository's flags rather than the samples' CMake files: nvcc's default
# static CUDA runtime, sm_90 code plus compute_90 PTX, -O2, C++17, and relocatable device
# code (-rdc=true, as the samples' own CUDA_SEPARABLE_COMPILATION). Driver-API samples
# link a stub libcuda.so made here from guest-lib/exports/libcuda.so.1.txt: at run time
# the real driver (native) or vmcuda's (bridged) is loaded. Programs are stripped.
#
# Layout of OUTDIR: OUTDIR/<name>/<name> with its companions beside it (fatbins, PTX,
# kernel sources for NVRTC, data files), since each sample looks for them in its
# working directory; OUTDIR/list.txt (the list it was built from), OUTDIR/BUILT (the
# names built), OUTDIR/SAMPLES_COMMIT (the checkout's commit), OUTDIR/COMMIT (this
# repository's), OUTDIR/build-logs/<name>.log for each sample that did not build; and
# beside it OUTDIR.tar.xz, the whole directory in one file small enough to carry (about
# 6 MB for 50 MB), which run.sh takes in its place.
#
# Environment:
#   NVCC                    a CUDA 13 nvcc (default: nvcc on PATH if CUDA 13, else the
#                           toolchain .ci/install-nvcc.sh installs)
#   VMCUDA_SAMPLES_LIBROOTS colon-separated roots with include/ and lib/ holding what
#                           the nvcc root of .ci/install-nvcc.sh lacks: cuFFT, cuRAND,
#                           cuSOLVER, cuSPARSE, nvJitLink, cuda_profiler_api.h and
#                           NVTX3's headers. The
#                           wheels install them under nvidia/cu13:
#                             pip install --target DIR nvidia-cufft nvidia-curand \
#                               nvidia-cusolver nvidia-cusparse 'nvidia-nvjitlink==13.0.*' \
#                               'nvidia-cuda-profiler-api==13.0.*' 'nvidia-nvtx==13.0.*'
#                           then VMCUDA_SAMPLES_LIBROOTS=DIR/nvidia/cu13 (nvidia-nvtx
#                           for NVTX3's headers, nvtx3/, which cudaGraphsPerfScaling
#                           includes; they load no library unless a profiler asks)
#   VMCUDA_SAMPLES_COMMIT   the checkout's commit when CHECKOUT is not a git work tree
#   JOBS                    parallel builds (default 2)
# Exits non-zero if any sample failed to build (the others are still built).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
usage="usage: build.sh CHECKOUT OUTDIR [NAME...]"
[ "$#" -ge 2 ] || { echo "$usage" >&2; exit 2; }
checkout="$(cd "$1" && pwd)"
mkdir -p "$2"
out="$(cd "$2" && pwd)"
shift 2
list="$here/list.txt"
pinned=c94ff366aed18c797b8a85dfaac7817b0228b420

log() { echo "build.sh: $*" >&2; }
[ -d "$checkout/Samples" ] && [ -d "$checkout/Common" ] ||
    { log "$checkout is not a cuda-samples checkout (no Samples/ and Common/)"; exit 2; }

# ---------------------------------------------------------------- toolchain
is_cuda13() { "$1" --version 2>/dev/null | grep -q 'release 13\.'; }
if [ -n "${NVCC:-}" ]; then
    nvcc="$NVCC"
elif command -v nvcc >/dev/null 2>&1 && is_cuda13 nvcc; then
    nvcc="$(command -v nvcc)"
else
    nvcc="$(bash "$repo/.ci/install-nvcc.sh" | tail -n 1)/bin/nvcc"
fi
is_cuda13 "$nvcc" || { log "$nvcc is not a CUDA 13 nvcc"; exit 2; }
curoot="$(dirname "$(dirname "$(readlink -f "$(command -v "$nvcc")")")")"

# Include and library directories: the nvcc root, then VMCUDA_SAMPLES_LIBROOTS.
roots=("$curoot")
IFS=: read -r -a extra_roots <<<"${VMCUDA_SAMPLES_LIBROOTS:-}"
for r in ${extra_roots[@]+"${extra_roots[@]}"}; do [ -n "$r" ] && roots+=("$r"); done
work="$(mktemp -d "${TMPDIR:-/tmp}/vmcuda-samples-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
linkdir="$work/lib"
mkdir -p "$linkdir"
incflags=()
libdirs=()
for r in "${roots[@]}"; do
    [ -d "$r/include" ] && [ "$r" != "$curoot" ] && incflags+=("-I$r/include")
    for d in "$r/lib" "$r/lib64" "$r/targets/x86_64-linux/lib"; do
        [ -d "$d" ] && libdirs+=("$d")
    done
done
# Wheels ship only versioned names (libcufft.so.12): give the linker plain ones.
for d in ${libdirs[@]+"${libdirs[@]}"}; do
    for f in "$d"/lib*.so.[0-9]*; do
        [ -e "$f" ] || continue
        base="$(basename "$f")"
        plain="${base%%.so.*}.so"
        [ -e "$d/$plain" ] || [ -e "$linkdir/$plain" ] || ln -s "$f" "$linkdir/$plain"
    done
done
# A stub driver to link the driver-API samples against: every export of the real
# libcuda.so.1, none of them callable (the real or vmcuda's driver is loaded at run time).
grep -v '^#' "$repo/guest-lib/exports/libcuda.so.1.txt" | sed '/^$/d' |
    awk '{printf "void %s(void) {}\n", $1}' >"$work/cuda_stub.c"
cc -shared -fPIC -o "$linkdir/libcuda.so" -Wl,-soname,libcuda.so.1 "$work/cuda_stub.c"
libflags=("-L$linkdir")
rpathlink="$linkdir"
for d in ${libdirs[@]+"${libdirs[@]}"}; do libflags+=("-L$d"); rpathlink="$rpathlink:$d"; done
libflags+=("-Xlinker" "-rpath-link=$rpathlink")

# ---------------------------------------------------------------- the list
if [ -d "$checkout/.git" ] || git -C "$checkout" rev-parse --git-dir >/dev/null 2>&1; then
    samples_commit="$(git -C "$checkout" rev-parse HEAD)"
else
    samples_commit="${VMCUDA_SAMPLES_COMMIT:-unknown}"
fi
[ "$samples_commit" = "$pinned" ] ||
    log "warning: checkout is at $samples_commit, list.txt was written against $pinned"

trim() { local s="$1"; s="${s#"${s%%[![:space:]]*}"}"; s="${s%"${s##*[![:space:]]}"}"; printf '%s' "$s"; }
declare -A line_of=()
names=()
while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in '#'*|'') continue ;; esac
    IFS='|' read -r name _ <<<"$line"
    name="$(trim "$name")"
    line_of[$name]="$line"
    names+=("$name")
done <"$list"
all_names=("${names[@]}")
if [ "$#" -gt 0 ]; then
    for n in "$@"; do [ -n "${line_of[$n]:-}" ] || { log "$n is not in $list"; exit 2; }; done
    names=("$@")
fi

common=(-std=c++17 -O2 -rdc=true -gencode "arch=compute_90,code=[sm_90,compute_90]"
        -Wno-deprecated-gpu-targets "-I$checkout/Common" "-I$checkout/Common/UtilNPP"
        ${incflags[@]+"${incflags[@]}"})

# build_one NAME: builds one sample into $out/NAME; its log goes to $work/NAME.log.
build_one() {
    local name="$1" line path srcs libs files f kind src stem
    line="${line_of[$name]}"
    IFS='|' read -r _ path srcs libs files _ <<<"$line"
    path="$(trim "$path")"
    # `@/DIR` is a directory of this repository (vmcuda's own checks of NVIDIA's
    # libraries, built and run the same way); anything else is in the checkout.
    case "$path" in
        @/*) path="$repo/${path#@/}" ;;
        *) path="$checkout/$path" ;;
    esac
    local dest="$out/$name"
    rm -rf "$dest"
    mkdir -p "$dest"
    local inc=(-I"$path")
    [ -d "$path/inc" ] && inc+=(-I"$path/inc")
    # A -DNAME=VALUE among the sources is a macro for their compilation.
    local srcpaths=() defs=()
    for f in $srcs; do
        case "$f" in
            -D*) defs+=("$f") ;;
            *) srcpaths+=("$path/$f") ;;
        esac
    done
    local link=()
    for f in $libs; do
        case "$f" in
            -) ;;
            cuda) link+=(-lcuda) ;;
            cublas) link+=(-lcublas -lcublasLt) ;;
            cufft|curand|cusolver|cusparse|nvrtc|nvJitLink|nvjpeg|nvvm) link+=("-l$f") ;;
            # The NPP libraries vmcuda's own NPP check uses (core, memory support,
            # colour conversion, data exchange).
            npp) link+=(-lnppc -lnppisu -lnppicc -lnppidei) ;;
            # cuBLASXt is part of libcublas.so.13 (its own name here for the list's sake).
            cublasxt) link+=(-lcublas) ;;
            openmp) link+=(-Xcompiler -fopenmp -lgomp) ;;
            # Any other library by the linker's own flag (NPP's parts, FreeImage).
            -l*) link+=("$f") ;;
            *) echo "unknown lib $f" ; return 1 ;;
        esac
    done
    "$nvcc" "${common[@]}" ${defs[@]+"${defs[@]}"} "${inc[@]}" -o "$dest/$name" "${srcpaths[@]}" \
        "${libflags[@]}" ${link[@]+"${link[@]}"} -lpthread || return 1
    for f in $files; do
        [ "$f" = - ] && continue
        kind="${f%%:*}"
        src="${f#*:}"
        stem="$(basename "${src%.*}")"
        case "$kind" in
            fatbin) "$nvcc" "${common[@]/-rdc=true/-rdc=false}" "${inc[@]}" -fatbin \
                        -o "$dest/${stem}64.fatbin" "$path/$src" || return 1 ;;
            ptx) "$nvcc" -std=c++17 -O2 -arch=sm_90 -Wno-deprecated-gpu-targets \
                     "-I$checkout/Common" "${inc[@]}" -ptx -o "$dest/${stem}64.ptx" "$path/$src" || return 1 ;;
            # toolkit:F copies file F of the toolkit's library directories (libcudadevrt.a
            # for the libNVVM sample that links device-side launches).
            toolkit) local found=""
                     for d in ${libdirs[@]+"${libdirs[@]}"}; do
                         if [ -e "$d/$src" ]; then found="$d/$src"; break; fi
                     done
                     [ -n "$found" ] || { echo "$src not in ${libdirs[*]}"; return 1; }
                     cp "$found" "$dest/" ;;
            # include:P copies file or directory P of the nvcc root's include directory
            # beside the program under its last name (the headers NVRTC samples compile
            # against: cooperative_groups.h, cooperative_groups/, cccl/nv, cccl/cuda).
            include) cp -r "$curoot/include/$src" "$dest/" || return 1 ;;
            # data:F copies file F of the checkout's Common/data.
            data) cp "$checkout/Common/data/$src" "$dest/" || return 1 ;;
            copy) mkdir -p "$dest/$(dirname "$src")"
                  cp -r "$path/$src" "$dest/$(dirname "$src")/" || return 1 ;;
            *) echo "unknown file kind $kind"; return 1 ;;
        esac
    done
    strip "$dest/$name"
}

rm -rf "$out/build-logs"
log "nvcc=$nvcc; ${#names[@]} samples into $out (jobs: ${JOBS:-2})"
# Jobs in the background, at most JOBS at a time; each leaves NAME.ok or NAME.log.
running=0
for name in "${names[@]}"; do
    (
        if build_one "$name" >"$work/$name.log" 2>&1; then
            touch "$work/$name.ok"
        fi
    ) &
    running=$((running + 1))
    if [ "$running" -ge "${JOBS:-2}" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait || true

built=()
failed=()
for name in "${names[@]}"; do
    if [ -e "$work/$name.ok" ]; then
        built+=("$name")
    else
        failed+=("$name")
        mkdir -p "$out/build-logs"
        cp "$work/$name.log" "$out/build-logs/$name.log"
        rm -rf "${out:?}/$name"
    fi
done

cp "$list" "$out/list.txt"
# BUILT: every listed sample present in OUTDIR, this build's and earlier ones'.
all_built=()
for name in "${all_names[@]}"; do [ -x "$out/$name/$name" ] && all_built+=("$name"); done
printf '%s\n' ${all_built[@]+"${all_built[@]}"} >"$out/BUILT"
echo "$samples_commit" >"$out/SAMPLES_COMMIT"
commit="$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)"
git -C "$repo" diff --quiet HEAD 2>/dev/null || commit="$commit (with uncommitted changes)"
echo "$commit" >"$out/COMMIT"

# One compressed file to carry: the programs are mostly NVIDIA's static runtime, which
# xz shrinks about eightfold (run.sh takes the archive as well as the directory).
tar -C "$(dirname "$out")" -cJf "$out.tar.xz" "$(basename "$out")"
log "built ${#built[@]}/${#names[@]} samples; $(du -sh "$out" | cut -f1) in $out, $(du -sh "$out.tar.xz" | cut -f1) in $out.tar.xz"
if [ "${#failed[@]}" -gt 0 ]; then
    for name in "${failed[@]}"; do
        log "FAILED $name (log: $out/build-logs/$name.log):"
        tail -n 15 "$out/build-logs/$name.log" >&2
    done
    exit 1
fi
