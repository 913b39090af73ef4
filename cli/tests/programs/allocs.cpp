// C++ allocations for `recorder record --alloc` tests (built with -O2): new/delete and the
// standard containers go through operator new, which calls malloc.
//   new_site     new char[8192] x 8192 = 64 MiB, deleted
//   vector_site  std::vector<int> of 16384 elements (64 KiB) x 512 = 32 MiB, dropped
//   keep_site    std::string of 4000 chars x 4096 = ~16 MiB, kept until exit (live)
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

static std::vector<std::string> kept;
static volatile unsigned long sink;

__attribute__((noinline)) void new_site() {
    for (int i = 0; i < 8192; i++) {
        char *p = new char[8192];
        p[0] = (char)i;
        sink += (unsigned char)p[0];
        delete[] p;
    }
}

__attribute__((noinline)) void vector_site() {
    for (int i = 0; i < 512; i++) {
        std::vector<int> v(16384, i);
        sink += v[100];
    }
}

__attribute__((noinline)) void keep_site() {
    for (int i = 0; i < 4096; i++) kept.emplace_back(4000, (char)('a' + i % 26));
}

int main() {
    new_site();
    vector_site();
    keep_site();
    std::printf("kept %zu strings\n", kept.size());
    return 0;
}
