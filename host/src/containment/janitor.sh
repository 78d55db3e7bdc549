# toolbox's janitor (host/src/containment/janitor.rs starts it): bash -c SCRIPT janitor
# TOOLBOX_PID TOOLBOX_START KIND:DIR... with the registration pipe on stdin.
trap '' INT TERM HUP QUIT PIPE
tb=$1 tb_start=$2
shift 2
declare -A live=() procs=()
st= start=
# Sets st (state) and start (start time) of process $1 from /proc/$1/stat.
stat_of() {
  local line
  { read -r line < "/proc/$1/stat"; } 2>/dev/null || return 1
  local -a f=(${line##*) })
  st=${f[0]} start=${f[19]}
}
# Whether process $1 with start time $2 is still running (a zombie is dead).
alive() { stat_of "$1" && [[ $st != [ZX] && $start == "$2" ]]; }
while :; do
  if IFS= read -r -t 2 line; then
    case $line in
      +*) live[${line:1}]=1 ;;
      -*) unset "live[${line:1}]" ;;
      \**) procs[${line:1}]=1 ;;
      /*) unset "procs[${line:1}]" ;;
    esac
  elif (( $? > 128 )); then
    # No news. A process toolbox forked without exec may hold the pipe open after toolbox
    # died, so look at toolbox itself.
    alive "$tb" "$tb_start" || break
  else
    break
  fi
done
# toolbox is gone. First stop every cgroup as a whole, so nothing inside forks away.
for entry in "$@"; do
  kind=${entry%%:*} dir=${entry#*:}
  case $kind in
    v2) [[ -e $dir/cgroup.kill ]] && echo 1 > "$dir/cgroup.kill" ;;
    freezer) echo FROZEN > "$dir/freezer.state" ;;
  esac
done 2>/dev/null
# Then the registered process groups ...
for id in "${!live[@]}"; do
  kill -KILL -- "-$id"
done 2>/dev/null
# ... anything that moved to another process group of the same sessions ...
if (( ${#live[@]} )); then
  for stat in /proc/[0-9]*/stat; do
    { read -r s < "$stat"; } 2>/dev/null || continue
    read -r _ _ _ sid _ <<< "${s##*) }"
    [[ -n ${live[$sid]:-} ]] && kill -KILL "${stat//[!0-9]/}" 2>/dev/null
  done
fi
# ... and the registered processes that are still the same processes.
for key in "${!procs[@]}"; do
  alive "${key%%:*}" "${key#*:}" && kill -KILL "${key%%:*}" 2>/dev/null
done
# Kill what is left in the cgroups until they are empty (bounded), thaw, and remove them.
(( $# )) || exit 0
for (( round = 0; round < 500; round++ )); do
  left=
  for entry in "$@"; do
    dir=${entry#*:}
    for f in "$dir"/cgroup.procs "$dir"/*/cgroup.procs; do
      [[ -r $f ]] || continue
      while read -r pid; do
        kill -KILL "$pid" && left=1
      done < "$f"
    done 2>/dev/null
    if (( round == 0 )) && [[ ${entry%%:*} == freezer ]]; then
      echo THAWED > "$dir/freezer.state"
    fi 2>/dev/null
  done
  [[ -z $left ]] && break
  sleep 0.01 2>/dev/null
done
for entry in "$@"; do
  dir=${entry#*:}
  for sub in "$dir"/*/; do
    [[ -d $sub ]] && rmdir "$sub"
  done
  rmdir "$dir"
done 2>/dev/null
exit 0
