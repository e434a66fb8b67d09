package affinity.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter;
import org.apache.spark.sql.execution.arrow.ArrowWriter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Nanoseconds per row, one thread, no Spark job: filling Arrow vectors with Spark's
 * {@code ArrowWriter} against {@link ArrowGroup}'s direct path, and keeping a row with
 * {@code row.copy()} against copying it into one reused buffer, over the same 10,000 rows of
 * {@code benches/bench_spark.py}'s 5 columns. Build the jar (scripts/build-jvm.sh), then:
 *
 * <pre>
 * jars=.venv/lib/python3.11/site-packages/pyspark/jars
 * javac --release 17 -cp "$jars/*:target/jvm/classes" -d target/jvm/bench benches/jvm/FillBench.java
 * java -cp "target/jvm/bench:target/jvm/classes:$jars/*" affinity.spark.FillBench 50 40   # rounds, trials
 * </pre>
 */
public final class FillBench {
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
    double[][] all = new double[4][trials];
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
      spark.root().close();
      group.close();
    }
    String[] names = {"Spark ArrowWriter", "ArrowGroup direct", "row.copy()", "row buffer"};
    for (int m = 0; m < 4; m++) {
      int from = trials / 4; // the first quarter of trials: JIT warm-up, left out
      double[] warm = java.util.Arrays.copyOfRange(all[m], from, trials);
      java.util.Arrays.sort(warm);
      System.out.printf("%-18s ns/row over %d warm trials: min %.1f, median %.1f, max %.1f%n", names[m], warm.length, warm[0], warm[warm.length / 2], warm[warm.length - 1]);
    }
  }
}
