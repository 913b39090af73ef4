// C++ with exceptions thrown through several frames while the recorder samples: the program must
// not crash, and samples must still reach main. Built with -O2 -fomit-frame-pointer.
#include <cstdlib>
#include <ctime>
#include <stdexcept>
#include <string>

static volatile double sink;

static double cpu_ms() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) double spin(long n) {
    double s = 0;
    for (long i = 0; i < n; i++) s = s * 0.999999 + (double)(i & 7);
    return s;
}

__attribute__((noinline)) double thrower(int depth, long n) {
    if (depth == 0) {
        double v = spin(n);
        if (v >= 0) throw std::runtime_error("deep " + std::to_string(v));
        return v;
    }
    return thrower(depth - 1, n) + 1.0;
}

__attribute__((noinline)) double catcher(long n) {
    try {
        return thrower(12, n);
    } catch (const std::runtime_error &e) {
        return (double)e.what()[0];
    }
}

int main(int argc, char **argv) {
    double ms = argc > 1 ? std::atof(argv[1]) : 1500;
    long thrown = 0;
    while (cpu_ms() < ms) {
        sink += catcher(200000);
        thrown++;
    }
    return thrown > 0 ? 0 : 1;
}
