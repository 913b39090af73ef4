import java.nio.file.Path;
import java.time.Instant;
import jdk.jfr.consumer.EventStream;

/**
 * Follows a recorder repository with the JDK's own streaming reader and prints one line per event
 * of the given type ("EVENT <seq> <stackDepth> <topFrame> <thread> <frame,frame,...>"), per flush ("FLUSH") and at the end
 * ("CLOSED"). Usage: java LiveStream.java DIR EVENT_TYPE [SEQ_FIELD]
 */
public class LiveStream {
    public static void main(String[] args) throws Exception {
        Path dir = Path.of(args[0]);
        String type = args[1];
        String seqField = args.length > 2 ? args[2] : "seq";
        try (EventStream es = EventStream.openRepository(dir)) {
            es.setStartTime(Instant.EPOCH);
            es.onEvent(type, e -> {
                long seq = e.hasField(seqField) ? e.getLong(seqField) : -1;
                var st = e.getStackTrace();
                int depth = st == null ? 0 : st.getFrames().size();
                String top = depth == 0 ? "-" : st.getFrames().get(0).getMethod().getName();
                jdk.jfr.consumer.RecordedThread t = e.getThread();
                if (t == null && e.hasField("sampledThread")) {
                    t = e.getValue("sampledThread");
                }
                String thread = t == null ? "-" : (t.getJavaName() != null ? t.getJavaName() : String.valueOf(t.getOSName()));
                StringBuilder frames = new StringBuilder();
                if (st != null) {
                    for (var f : st.getFrames()) {
                        if (frames.length() > 0) frames.append(',');
                        frames.append(f.getMethod().getName().replace(' ', '_').replace(',', '_'));
                    }
                }
                System.out.println("EVENT " + seq + " " + depth + " " + top.replace(' ', '_') + " " + thread.replace(' ', '_') + " " + frames);
                System.out.flush();
            });
            es.onFlush(() -> { System.out.println("FLUSH"); System.out.flush(); });
            es.onError(t -> { System.out.println("ERROR " + t); System.out.flush(); });
            es.onClose(() -> { System.out.println("CLOSED"); System.out.flush(); });
            es.start();
        }
        System.out.println("DONE");
    }
}
