#!/usr/bin/env bash
# Generates the large program of scripts/footprint.sh: a C++ program of UNITS translation units
# (default 10) of 400 functions each, every function with its own types (a struct holding a
# std::vector, a std::string and a std::map) and two template instances, built with -O1 -g: a
# binary of tens of MB, most of it debug info. Its main calls every function in turn for argv[1]
# seconds (default 60), so samples land all over the binary, then prints its own memory from
# /proc/self/status like small.c.
#
# Usage: scripts/footprint/large.sh OUTPUT [UNITS]
set -euo pipefail
out=$1
units=${2:-10}
per_unit=400
src="$out.src"
rm -rf "$src"
mkdir -p "$src"
for ((u = 0; u < units; u++)); do
    {
        echo "#include <map>"
        echo "#include <string>"
        echo "#include <vector>"
        echo "namespace u$u {"
        for ((i = 0; i < per_unit; i++)); do
            echo "struct S$i { std::vector<long> v; std::string name; std::map<int, long> m; long k$i; };"
            echo "template <int N> __attribute__((noinline)) long t$i(S$i &s) { long r = 0; for (int j = 0; j < N; j++) r += s.v[j % s.v.size()] * (j ^ $i); return r + (long)s.m.size(); }"
            echo "__attribute__((noinline)) long f$i(long n) { S$i s; s.v.assign(8, n); s.name = \"u${u}f$i\"; s.m[$i] = n; long r = t$i<$((i % 7 + 1))>(s) + t$i<$((i % 5 + 8))>(s); for (long j = 0; j < n; j++) r = r * 31 + (j ^ $i); return r; }"
        done
        printf 'long (*table[])(long) = {'
        for ((i = 0; i < per_unit; i++)); do printf 'f%d,' "$i"; done
        echo '};'
        echo "}"
    } >"$src/u$u.cpp"
done
{
    echo '#include <cstdio>'
    echo '#include <cstdlib>'
    echo '#include <cstring>'
    echo '#include <ctime>'
    echo '#include <fcntl.h>'
    echo '#include <unistd.h>'
    for ((u = 0; u < units; u++)); do echo "namespace u$u { extern long (*table[$per_unit])(long); }"; done
    printf 'static long (**tables[])(long) = {'
    for ((u = 0; u < units; u++)); do printf 'u%d::table,' "$u"; done
    echo '};'
    cat <<'MAIN'
static volatile long sink;
static double now_s() { timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    double until = now_s() + (argc > 1 ? atof(argv[1]) : 60);
    const int units = sizeof tables / sizeof tables[0];
    for (long k = 0; now_s() < until; k++)
        for (int u = 0; u < units; u++)
            for (int i = 0; i < PER_UNIT; i++) sink += tables[u][(i + k) % PER_UNIT](2000);
    static char buf[8192];
    int fd = open("/proc/self/status", O_RDONLY);
    ssize_t len = fd < 0 ? 0 : read(fd, buf, sizeof buf - 1);
    if (fd >= 0) close(fd);
    buf[len > 0 ? len : 0] = 0;
    for (char *line = buf; line && *line;) {
        char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line + 1) : strlen(line);
        if (!strncmp(line, "VmRSS:", 6) || !strncmp(line, "VmHWM:", 6) || !strncmp(line, "RssAnon:", 8) ||
            !strncmp(line, "RssFile:", 8))
            (void)!write(1, line, n);
        line = end ? end + 1 : 0;
    }
    return 0;
}
MAIN
} >"$src/main.cpp"
objs=()
for f in "$src"/*.cpp; do
    g++ -O1 -g -DPER_UNIT=$per_unit -c "$f" -o "${f%.cpp}.o" &
    objs+=("${f%.cpp}.o")
    # Two compilers at a time: the machine may be shared.
    (($(jobs -r | wc -l) >= 2)) && wait -n
done
wait
g++ -o "$out" "${objs[@]}"
rm -rf "$src"
