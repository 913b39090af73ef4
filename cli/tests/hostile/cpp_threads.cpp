// C++ on threads: exceptions thrown through a dozen frames and caught, again and again, on eight
// threads at once (the unwinder runs while a profiler's signals arrive); containers that grow
// and shrink; a thread_local object whose destructor allocates; std::async and a
// mutex/condition-variable ping-pong between two threads.
#include <condition_variable>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

struct Tracker {
    std::vector<std::string> names;
    ~Tracker() {
        std::string s;
        for (auto &n : names) s += n;
        names.clear();
    }
};
static thread_local Tracker tracker;

__attribute__((noinline)) static long thrower(int depth, long v) {
    if (depth == 0) {
        if (v % 3 == 0) throw std::runtime_error("deep " + std::to_string(v));
        return v;
    }
    std::vector<int> frame(depth + 1, depth);
    return thrower(depth - 1, v + frame.back());
}

static long worker(int id) {
    long caught = 0, sum = 0;
    std::map<int, std::string> m;
    for (int i = 0; i < 20000; i++) {
        try {
            sum += thrower(12, id * 100000 + i);
        } catch (const std::runtime_error &e) {
            caught += e.what()[0] == 'd';
        }
        m[i % 512] = std::to_string(i);
        if (i % 1000 == 0) tracker.names.push_back(m[i % 512]);
    }
    return caught * 1000003 + sum;
}

int main() {
    std::vector<std::future<long>> results;
    for (int id = 0; id < 8; id++) results.push_back(std::async(std::launch::async, worker, id));
    long total = 0;
    for (auto &r : results) total ^= r.get();

    std::mutex mu;
    std::condition_variable cv;
    int turn = 0, rounds = 0;
    std::thread other([&] {
        for (int i = 0; i < 2000; i++) {
            std::unique_lock<std::mutex> lock(mu);
            cv.wait(lock, [&] { return turn == 1; });
            turn = 0;
            rounds++;
            cv.notify_one();
        }
    });
    for (int i = 0; i < 2000; i++) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return turn == 0; });
        turn = 1;
        cv.notify_one();
    }
    other.join();
    std::printf("checksum %ld, ping-pong rounds %d\n", total, rounds);
    return 0;
}
