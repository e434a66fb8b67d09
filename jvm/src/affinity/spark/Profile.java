package affinity.spark;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

/**
 * Time per phase of one write task, printed to the JVM's stderr at the task's commit when
 * {@code $AFFINITY_SPARK_PROFILE} is {@code 1} (a debugging aid, docs/spark.md "Two writers";
 * off, every method returns at once and nothing is measured).
 */
final class Profile {
  /** Environment variable that turns the per-task profile on ({@code 1}). */
  static final String ENV = "AFFINITY_SPARK_PROFILE";
  /** Whether this JVM profiles its write tasks. */
  static final boolean ON = "1".equals(System.getenv(ENV));

  /** One row in this many is timed in {@code write()} (a power of two); its time counts this many times. */
  static final int ROW_SAMPLE = 64;

  /** The phases, in the order they are printed. */
  enum Phase {
    /** {@code write()}: the row's key bytes and its copy into the chunk (one row in {@link #ROW_SAMPLE} timed). */
    ROWS,
    /** The native call routing a chunk's keys to queues. */
    ROUTE,
    /** Filling the Arrow vectors of a row group ({@link ArrowGroup}). */
    FILL,
    /** Arrow IPC encoding of a row group (and of its halves when it exceeds {@code maxBatchBytes}). */
    ENCODE,
    /** The native publish calls (copy into Rust, the group publisher's publish). */
    PUBLISH,
    /** The wait at commit for this task's acknowledgements. */
    FLUSH
  }

  private static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

  private final long started = System.nanoTime();
  private final long startedCpu = cpu();
  private final long[] nanos = new long[Phase.values().length];

  /** The task thread's CPU time in ns (-1 where the JVM does not measure it). */
  private static long cpu() {
    return THREADS.isCurrentThreadCpuTimeSupported() ? THREADS.getCurrentThreadCpuTime() : -1;
  }

  /** A clock reading when profiling, else 0 (no system call). */
  static long now() {
    return ON ? System.nanoTime() : 0;
  }

  /** Adds the time since {@code since} (a {@link #now} reading) to {@code phase}. */
  void add(Phase phase, long since) {
    if (ON) {
      nanos[phase.ordinal()] += System.nanoTime() - since;
    }
  }

  /** Clock readings timed back to back to measure {@link #CLOCK_NS}. */
  static final int CLOCK_READS = 10_000;
  /**
   * What one {@code System.nanoTime()} costs in this JVM (the least of 5 measures of
   * {@link #CLOCK_READS} readings, when profiling): taken off each sampled row's time, which
   * holds one reading, so the {@code rows} phase shows the writer's work, not the clock's.
   */
  static final long CLOCK_NS = ON ? clockCost() : 0;

  private static long clockCost() {
    long least = Long.MAX_VALUE;
    for (int round = 0; round < 5; round++) {
      long start = System.nanoTime();
      long last = start;
      for (int i = 0; i < CLOCK_READS; i++) {
        last = System.nanoTime();
      }
      least = Math.min(least, (last - start) / CLOCK_READS);
    }
    return least;
  }

  /**
   * Adds {@link #ROW_SAMPLE} times the time since {@code since} to {@code phase} (one sampled
   * row), less one clock reading ({@link #CLOCK_NS}).
   */
  void addSample(Phase phase, long since) {
    nanos[phase.ordinal()] += Math.max(0, System.nanoTime() - since - CLOCK_NS) * ROW_SAMPLE;
  }

  /**
   * One line: the task, its rows and messages, its wall time, the task thread's CPU time (on a
   * loaded machine the steadier figure) and each phase's wall time.
   */
  void print(int partition, long batchId, long rows, long messages) {
    if (!ON) {
      return;
    }
    long total = System.nanoTime() - started;
    long measured = 0;
    StringBuilder line = new StringBuilder("affinity-profile partition=").append(partition).append(" batch=")
        .append(batchId).append(" rows=").append(rows).append(" messages=").append(messages)
        .append(" total_ms=").append(total / 1_000_000)
        .append(" cpu_ms=").append(startedCpu < 0 ? -1 : (cpu() - startedCpu) / 1_000_000);
    for (Phase phase : Phase.values()) {
      measured += nanos[phase.ordinal()];
      line.append(' ').append(phase.name().toLowerCase()).append("_ms=").append(nanos[phase.ordinal()] / 1_000_000);
    }
    // The rest: Spark producing the rows (the query's own work) and what no phase covers.
    line.append(" other_ms=").append((total - measured) / 1_000_000);
    System.err.println(line);
  }

  /**
   * One line for the driver's commit or abort of a batch: the time to publish the markers to
   * every queue and the wait for their acknowledgements (when profiling).
   */
  static void printMarkers(long batchId, boolean commit, long since, long sent) {
    if (!ON) {
      return;
    }
    long now = System.nanoTime();
    System.err.println("affinity-profile " + (commit ? "commit" : "abort") + " batch=" + batchId
        + " publish_ms=" + (sent - since) / 1_000_000 + " flush_ms=" + (now - sent) / 1_000_000);
  }
}
