// The JVM's cost of committing a small JFR event (two fields: long, int), with and without a stack
// trace, for comparison with `cargo bench --bench commit`. Run by that bench; prints one
// `name: ns_per_event` line per case: on the committing thread's CPU clock (immune to other
// processes taking the CPU), and with a `_wall` suffix on the wall clock.
//
// Usage: java CommitBench <events_no_stack> <events_stack> <depth> <reps>
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.concurrent.CyclicBarrier;
import jdk.jfr.Event;
import jdk.jfr.Label;
import jdk.jfr.Name;
import jdk.jfr.Recording;

public class CommitBench {
    @Name("bench.Small")
    @Label("Small")
    static class Small extends Event {
        @Label("a")
        long a;
        @Label("b")
        int b;
    }

    static volatile long sink;
    static final ThreadMXBean MX = ManagementFactory.getThreadMXBean();

    static void commitLoop(long n) {
        for (long i = 0; i < n; i++) {
            Small e = new Small();
            e.a = i;
            e.b = (int) i;
            e.commit();
        }
    }

    /**
     * Commits `n` events from the bottom of a `depth`-deep recursion; returns {cpu, wall} ns of
     * the loop.
     */
    static long[] recurse(int depth, long n) {
        if (depth == 0) {
            long c0 = MX.getCurrentThreadCpuTime();
            long t0 = System.nanoTime();
            commitLoop(n);
            long wall = System.nanoTime() - t0;
            return new long[] {MX.getCurrentThreadCpuTime() - c0, wall};
        }
        long[] r = recurse(depth - 1, n);
        sink += depth; // keeps the frame from being a tail call
        return r;
    }

    /** ns per event, {cpu, wall}. */
    static double[] timeOne(int depth, long n) {
        long[] t = recurse(depth, n);
        return new double[] {(double) t[0] / n, (double) t[1] / n};
    }

    /** Two threads committing concurrently; returns the mean per-thread ns per event. */
    static double[] timeTwo(int depth, long n) throws Exception {
        CyclicBarrier barrier = new CyclicBarrier(2);
        double[][] result = new double[2][];
        Thread[] threads = new Thread[2];
        for (int t = 0; t < 2; t++) {
            final int idx = t;
            threads[t] = new Thread(() -> {
                try {
                    barrier.await();
                } catch (Exception ex) {
                    throw new RuntimeException(ex);
                }
                result[idx] = timeOne(depth, n);
            });
            threads[t].start();
        }
        for (Thread th : threads) th.join();
        return new double[] {(result[0][0] + result[1][0]) / 2, (result[0][1] + result[1][1]) / 2};
    }

    static double median(double[] xs) {
        double[] s = xs.clone();
        java.util.Arrays.sort(s);
        return s[s.length / 2];
    }

    interface Case {
        double[] run() throws Exception;
    }

    /** Median of `reps` runs, {cpu, wall} separately. */
    static double[] measure(int reps, Case c) throws Exception {
        double[] cpu = new double[reps];
        double[] wall = new double[reps];
        for (int i = 0; i < reps; i++) {
            double[] r = c.run();
            cpu[i] = r[0];
            wall[i] = r[1];
        }
        return new double[] {median(cpu), median(wall)};
    }

    public static void main(String[] args) throws Exception {
        long nNoStack = Long.parseLong(args[0]);
        long nStack = Long.parseLong(args[1]);
        int depth = Integer.parseInt(args[2]);
        int reps = Integer.parseInt(args[3]);

        try (Recording r = new Recording()) {
            r.setToDisk(true);
            r.enable(Small.class).withoutStackTrace().withoutThreshold();
            r.start();

            // Warm-up (JIT: C2 compiles commitLoop, recurse and the event's commit).
            for (int i = 0; i < 5; i++) {
                timeOne(depth, nNoStack / 5);
            }
            double[] noStack = measure(reps, () -> timeOne(depth, nNoStack));
            double[] noStack2 = measure(reps, () -> timeTwo(depth, nNoStack));

            r.enable(Small.class).withStackTrace();
            for (int i = 0; i < 3; i++) {
                timeOne(depth, nStack / 5);
            }
            double[] stack = measure(reps, () -> timeOne(depth, nStack));
            double[] stack2 = measure(reps, () -> timeTwo(depth, nStack));
            r.stop();

            String[] names = {"no_stack", "stack", "no_stack", "stack"};
            String[] threads = {"", "", "_2threads", "_2threads"};
            double[][] results = {noStack, stack, noStack2, stack2};
            for (int i = 0; i < 4; i++) {
                System.out.printf("jvm_commit_%s_ns%s: %.1f%n", names[i], threads[i], results[i][0]);
                System.out.printf("jvm_commit_%s_ns%s_wall: %.1f%n", names[i], threads[i], results[i][1]);
            }
        }
    }
}
