package affinity.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter;
import org.apache.spark.sql.execution.arrow.ArrowWriter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Nanoseconds per row, one thread, no Spark job: filling Arrow vectors with Spark's
 * {@code ArrowWriter} against {@link ArrowGroup}'s direct path, keeping a row with
 * {@code row.copy()} against copying it into one reused buffer, and the writer's path over 8
 * queues' row groups (chunk copy, then fill) in large chunks in row order against small chunks
 * filled queue by queue (row by row, and column by column: {@link ArrowGroup#writeRows}), over the same 10,000 rows of {@code benches/bench_spark.py}'s 5 columns. Build the jar (scripts/build-jvm.sh), then:
 *
 * <pre>
 * jars=.venv/lib/python3.11/site-packages/pyspark/jars
 * javac --release 17 -cp "$jars/*:target/jvm/classes" -d target/jvm/bench benches/jvm/FillBench.java
 * java -cp "target/jvm/bench:target/jvm/classes:$jars/*" affinity.spark.FillBench 50 40   # rounds, trials
 * </pre>
 */
public final class FillBench {
  /** Queues of the routed measurements (the benchmark group's QC). */
  static final int QUEUES = 8;

  /** Nanoseconds for {@code rounds} passes over {@code rows}: chunk copy, then the fill of each queue's group. */
  static long routed(InternalRow[] rows, int[] queues, int rounds, int chunk, boolean byQueue, boolean byColumn) {
    StructType schema = StructType.fromDDL("k string, a bigint, b bigint, c double, d bigint");
    ArrowGroup[] groups = new ArrowGroup[QUEUES];
    for (int q = 0; q < QUEUES; q++) {
      groups[q] = ArrowGroup.create(schema, "UTC", false);
    }
    byte[] arena = new byte[chunk * 128];
    UnsafeRow[] views = new UnsafeRow[chunk];
    for (int i = 0; i < chunk; i++) {
      views[i] = new UnsafeRow(5);
    }
    int[] order = new int[chunk];
    int[] starts = new int[QUEUES + 1];
    int[] next = new int[QUEUES];
    long t0 = System.nanoTime();
    for (int r = 0; r < rounds; r++) {
      for (int from = 0; from < rows.length; from += chunk) {
        int count = Math.min(chunk, rows.length - from);
        long at = org.apache.spark.unsafe.Platform.BYTE_ARRAY_OFFSET;
        for (int i = 0; i < count; i++) {
          UnsafeRow u = (UnsafeRow) rows[from + i];
          u.writeToMemory(arena, at);
          views[i].pointTo(arena, at, u.getSizeInBytes());
          at += u.getSizeInBytes();
        }
        if (!byQueue) {
          for (int i = 0; i < count; i++) {
            groups[queues[from + i]].write(views[i]);
          }
          continue;
        }
        java.util.Arrays.fill(starts, 0);
        for (int i = 0; i < count; i++) {
          starts[queues[from + i] + 1]++;
        }
        for (int q = 0; q < QUEUES; q++) {
          starts[q + 1] += starts[q];
        }
        System.arraycopy(starts, 0, next, 0, QUEUES);
        for (int i = 0; i < count; i++) {
          order[next[queues[from + i]]++] = i;
        }
        for (int q = 0; q < QUEUES; q++) {
          if (byColumn) {
            groups[q].writeRows(views, order, starts[q], starts[q + 1]);
            continue;
          }
          for (int k = starts[q]; k < starts[q + 1]; k++) {
            groups[q].write(views[order[k]]);
          }
        }
      }
      for (ArrowGroup group : groups) {
        group.finish();
        group.reset();
      }
    }
    long spent = System.nanoTime() - t0;
    for (ArrowGroup group : groups) {
      group.close();
    }
    return spent;
  }

  public static void main(String[] args) {
    StructType schema = StructType.fromDDL("k string, a bigint, b bigint, c double, d bigint");
    int n = 10_000;
    InternalRow[] rows = new InternalRow[n];
    UnsafeRowWriter w = new UnsafeRowWriter(5);
    for (int i = 0; i < n; i++) {
      w.reset();
      w.zeroOutNullBytes();
      w.write(0, UTF8String.fromString("acct-" + (i % 10000)));
      w.write(1, (long) i);
      w.write(2, (long) i * 2);
      w.write(3, (double) i);
      w.write(4, (long) (i % 97));
      rows[i] = w.getRow().copy();
    }
    int rounds = Integer.parseInt(args[0]);
    int trials = Integer.parseInt(args[1]);
    double[][] all = new double[7][trials];
    int[] queues = new int[n];
    for (int i = 0; i < n; i++) {
      queues[i] = Math.floorMod(rows[i].getUTF8String(0).hashCode(), QUEUES);
    }
    for (int trial = 0; trial < trials; trial++) {
      ArrowWriter spark = ArrowWriter.create(schema, "UTC", false, false);
      long t0 = System.nanoTime();
      for (int r = 0; r < rounds; r++) {
        for (InternalRow row : rows) {
          spark.write(row);
        }
        spark.finish();
        spark.reset();
      }
      long t1 = System.nanoTime();
      ArrowGroup group = ArrowGroup.create(schema, "UTC", false);
      if (!group.direct()) throw new AssertionError("not direct");
      long t2 = System.nanoTime();
      for (int r = 0; r < rounds; r++) {
        for (InternalRow row : rows) {
          group.write(row);
        }
        group.finish();
        group.reset();
      }
      long t3 = System.nanoTime();
      // the row keep: copy() per row against one reused buffer
      long t4 = System.nanoTime();
      long sink = 0;
      for (int r = 0; r < rounds; r++) {
        for (InternalRow row : rows) {
          sink += row.copy().hashCode() & 1;
        }
      }
      long t5 = System.nanoTime();
      byte[] arena = new byte[1 << 20];
      UnsafeRow view = new UnsafeRow(5);
      for (int r = 0; r < rounds; r++) {
        long at = org.apache.spark.unsafe.Platform.BYTE_ARRAY_OFFSET;
        for (InternalRow row : rows) {
          UnsafeRow u = (UnsafeRow) row;
          u.writeToMemory(arena, at);
          view.pointTo(arena, at, u.getSizeInBytes());
          at += u.getSizeInBytes();
          sink += view.getLong(1) & 1;
        }
      }
      long t6 = System.nanoTime();
      double per = (double) rounds * n;
      all[0][trial] = (t1 - t0) / per; all[1][trial] = (t3 - t2) / per; all[2][trial] = (t5 - t4) / per; all[3][trial] = (t6 - t5) / per;
      // The writer's whole path over QUEUES row groups: rows copied into a chunk buffer, then each
      // into its queue's group; chunks of 10,000 rows in arrival order against 1,024-row chunks
      // filled queue by queue (AffinityDataWriter.fillArrow).
      all[4][trial] = routed(rows, queues, rounds, n, false, false) / per;
      all[5][trial] = routed(rows, queues, rounds, 1024, true, false) / per;
      all[6][trial] = routed(rows, queues, rounds, 1024, true, true) / per;
      spark.root().close();
      group.close();
    }
    String[] names = {"Spark ArrowWriter", "ArrowGroup direct", "row.copy()", "row buffer",
        "8 queues, 10,000-row chunks in row order", "8 queues, 1,024-row chunks by queue",
        "8 queues, 1,024-row chunks by queue, column by column"};
    for (int m = 0; m < names.length; m++) {
      int from = trials / 4; // the first quarter of trials: JIT warm-up, left out
      double[] warm = java.util.Arrays.copyOfRange(all[m], from, trials);
      java.util.Arrays.sort(warm);
      System.out.printf("%-18s ns/row over %d warm trials: min %.1f, median %.1f, max %.1f%n", names[m], warm.length, warm[0], warm[warm.length / 2], warm[warm.length - 1]);
    }
  }
}
