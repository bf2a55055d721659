#!/bin/bash
# slurm-behind.sh TARGET COMPONENT...: one line "COMPONENT WHY" for each component of this host that is not
# at Slurm TARGET (a version, or a series that any of its micro releases matches); nothing when all are.
# A daemon is behind while its binary is older, while it is stopped, and while it still runs the binary a
# package upgrade replaced (its /proc/PID/exe then reads "... (deleted)").
set -u
target=$1
shift
at_target() { case "$1" in "$target" | "$target".*) return 0 ;; *) return 1 ;; esac; }
for component in "$@"; do
  if [ "$component" = client ]; then
    # The client tools print no version without a configuration (a configless node has none): their
    # package's, SchedMD's or the distribution's, "24.11.5-1" -> "24.11.5".
    installed=$(dpkg-query --show --showformat='${db:Status-Abbrev} ${Version}\n' slurm-smd-client slurm-client \
      2>/dev/null | awk '$1 == "ii" {sub(/-[^-]*$/, "", $2); print $2; exit}')
  else
    # "slurm 24.11.5" (SchedMD's packages) or "slurm-wlm 22.05.8" (Debian's)
    installed=$("$component" -V 2>/dev/null | awk '{print $2}')
  fi
  if ! at_target "$installed"; then
    echo "$component installed ${installed:-none}"
    continue
  fi
  [ "$component" = client ] && continue
  pid=$(cat "/run/$component.pid" 2>/dev/null)
  exe=$(readlink "/proc/${pid:-0}/exe" 2>/dev/null)
  if [ -z "$exe" ]; then
    echo "$component stopped"
  elif [[ $exe == *" (deleted)" ]]; then
    echo "$component running the binary its upgrade replaced"
  fi
done
