// A JVM workload for the CLI tests and scripts/bench-cli.sh: custom events with fields of every
// kind, allocation and CPU work on several threads (so jdk.ExecutionSample events with stack
// traces are recorded). Usage: java JfrWorkload EVENTS_PER_THREAD THREADS SPIN_PER_EVENT ROUNDS
// The events of each thread are spread over ROUNDS rounds with a 1.2 s pause after each, so that
// the JVM's once-a-second chunk-size check rotates chunks even in a short run.
import jdk.jfr.Category;
import jdk.jfr.DataAmount;
import jdk.jfr.Description;
import jdk.jfr.Event;
import jdk.jfr.Label;
import jdk.jfr.Name;
import jdk.jfr.StackTrace;
import jdk.jfr.Timespan;

public class JfrWorkload {
    @Name("recorder.test.AllKinds")
    @Label("All Kinds")
    @Category({"Recorder", "Test"})
    @Description("One field of every kind")
    static class AllKinds extends Event {
        @Label("Byte") byte byteValue;
        @Label("Short") short shortValue;
        @Label("Int") int intValue;
        @Label("Long") long longValue;
        @Label("Float") float floatValue;
        @Label("Double") double doubleValue;
        @Label("Char") char charValue;
        @Label("Boolean") boolean booleanValue;
        @Label("Text") String text;
        @Label("Class") Class<?> clazz;
        @Label("Thread") Thread thread;
        @Label("Span") @Timespan(Timespan.NANOSECONDS) long span;
        @Label("Amount") @DataAmount long amount;
    }

    @Name("recorder.test.Work")
    @Label("Work")
    @Category("Recorder")
    static class Work extends Event {
        @Label("Iteration") int iteration;
        @Label("Allocated") @DataAmount(DataAmount.BYTES) long allocated;
        @Label("Phase") String phase;
    }

    @Name("recorder.test.NoStack")
    @Label("No Stack")
    @StackTrace(false)
    static class NoStack extends Event {
        @Label("Sequence") long sequence;
    }

    static final String[] TEXTS = {
        "plain", "", null, "ünïcødé €", "quote \" backslash \\ tab \t newline \n end", "日本語",
    };
    static final Class<?>[] CLASSES = {String.class, JfrWorkload.class, int[].class, null, Thread.class};
    static volatile long sink;
    static int spinPerEvent = 2000;
    static int pauseEvery = 0;

    static long spin(int n) {
        long acc = 17;
        for (int k = 0; k < n; k++) {
            acc = acc * 31 + (acc >>> 7) + k;
        }
        return acc;
    }

    static void emit(int t, int n) {
        byte[][] keep = new byte[64][];
        for (int i = 0; i < n; i++) {
            Work work = new Work();
            work.begin();
            byte[] block = new byte[256 + (i % 64) * 32];
            keep[i % keep.length] = block;
            sink += spin(spinPerEvent);
            work.iteration = i;
            work.allocated = block.length;
            work.phase = (i % 2 == 0) ? "even" : "odd";
            work.commit();

            AllKinds e = new AllKinds();
            int v = i * 7 + t;
            e.byteValue = (byte) (i % 3 == 0 ? Byte.MIN_VALUE + (v % 5) : v);
            e.shortValue = (short) (i % 5 == 0 ? Short.MAX_VALUE - (v % 3) : -v);
            e.intValue = i % 11 == 0 ? Integer.MIN_VALUE + v : v * 1000003;
            e.longValue = i % 13 == 0 ? Long.MAX_VALUE - v : -((long) v << 33);
            e.floatValue = i % 7 == 0 ? 0.1f * v : -1.5e-7f * v;
            e.doubleValue = i % 9 == 0 ? Math.PI * v : 1.0e300 / (v + 1);
            e.charValue = (char) (i % 4 == 0 ? 'A' + (v % 26) : (i % 4 == 1 ? '\u00e9' : (i % 4 == 2 ? '\u20ac' : '"')));
            e.booleanValue = (v & 1) == 0;
            e.text = TEXTS[i % TEXTS.length] == null ? null : TEXTS[i % TEXTS.length] + (i % 10 == 0 ? "" : " #" + i);
            e.clazz = CLASSES[i % CLASSES.length];
            e.thread = (i % 3 == 0) ? null : Thread.currentThread();
            e.span = (long) v * 1000;
            e.amount = (long) v * 4096;
            e.commit();

            if (pauseEvery > 0 && i % pauseEvery == pauseEvery - 1) {
                try {
                    Thread.sleep(1200);
                } catch (InterruptedException ex) {
                    return;
                }
            }
            if (i % 4 == 0) {
                NoStack ns = new NoStack();
                ns.sequence = ((long) t << 32) | i;
                ns.commit();
            }
        }
    }

    public static void main(String[] args) throws Exception {
        int perThread = args.length > 0 ? Integer.parseInt(args[0]) : 5000;
        int threads = args.length > 1 ? Integer.parseInt(args[1]) : 3;
        spinPerEvent = args.length > 2 ? Integer.parseInt(args[2]) : 2000;
        int rounds = args.length > 3 ? Integer.parseInt(args[3]) : 1;
        pauseEvery = rounds > 1 ? Math.max(1, perThread / rounds) : 0;
        Thread[] workers = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            final int id = t;
            workers[t] = new Thread(() -> emit(id, perThread), "worker-" + t);
            workers[t].start();
        }
        for (Thread w : workers) {
            w.join();
        }
        System.out.println("done " + sink);
    }
}
