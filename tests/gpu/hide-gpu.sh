# Sourced by the GPU scripts: how a bridged run is kept away from the GPU. It sees the
# machine as a VM guest does: in its own mount namespace the GPU's device files and the
# host's driver libraries (libcuda.so*, NVML) are /dev/null, so nothing in it reaches
# the GPU but through the bridge. Needs root (the GPU machine's runs are); elsewhere
# the bridged run goes without, and `isolation` says so.
#   isolate:   the command prefix, an array (empty without isolation)
#   isolation: one line saying which it is, for the results
# shellcheck shell=bash disable=SC2034
hide_gpu='for f in /dev/nvidia* /dev/nvidia-caps/* $(ldconfig -p | awk '"'"'/libcuda\.so|libnvidia-ml\.so/ {print $NF}'"'"'); do
  [ -e "$f" ] && [ ! -d "$f" ] && mount --bind /dev/null "$(readlink -f "$f")"
done
exec "$@"'
isolate=()
isolation="none (not root, or no mount namespaces here)"
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
    isolate=(unshare -m sh -c "$hide_gpu" hide-gpu)
    isolation="own mount namespace: /dev/nvidia*, the host's libcuda.so* and libnvidia-ml.so* bound to /dev/null"
fi
