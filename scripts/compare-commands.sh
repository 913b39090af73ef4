# Sourced by the bench-record scripts: runs the commands of the arrays `names` and `cmds` in turn,
# round after round (a warm-up round first, not counted), so drift of a shared machine hits them
# alike, then prints per command the median CPU time (user + sys of the whole process tree) and
# wall time, and their ratios to the first command.
#
# Usage: compare_commands LABEL ROUNDS WORKDIR TITLE   (LABEL prefixes error messages)

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

compare_commands() {
    local label=$1 rounds=$2 work=$3 title=$4
    local -A cpu wall
    local r i u s e
    for ((r = 0; r < rounds + 1; r++)); do
        for i in "${!cmds[@]}"; do
            # shellcheck disable=SC2086 # the command strings are word-split on purpose
            /usr/bin/time -f "%U %S %e" -o "$work/time" ${cmds[$i]} >/dev/null 2>"$work/stderr" || {
                echo "$label: '${cmds[$i]}' failed:" >&2
                cat "$work/stderr" >&2
                exit 1
            }
            ((r == 0)) && continue # warm-up round
            read -r u s e <"$work/time"
            cpu[$i]+="$(echo "$u + $s" | bc) "
            wall[$i]+="$e "
        done
    done
    local width=0 name
    for name in "${names[@]}"; do ((${#name} > width)) && width=${#name}; done
    local base_cpu base_wall c w
    base_cpu=$(echo "${cpu[0]}" | median)
    base_wall=$(echo "${wall[0]}" | median)
    printf '%s, median of %s rounds\n' "$title" "$rounds"
    printf "%-${width}s %10s %8s %10s %8s\n" "command" "cpu s" "x bare" "wall s" "x bare"
    for i in "${!cmds[@]}"; do
        c=$(echo "${cpu[$i]}" | median)
        w=$(echo "${wall[$i]}" | median)
        printf "%-${width}s %10.3f %8.3f %10.3f %8.3f\n" "${names[$i]}" "$c" "$(echo "$c / $base_cpu" | bc -l)" "$w" \
            "$(echo "$w / $base_wall" | bc -l)"
    done
}
