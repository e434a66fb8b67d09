package affinity.spark;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The {@code affinity} table: writes in group mode ({@code value} arrow or binary) go to the JVM
 * writer; everything else (the stream source, channel mode, {@code value=json},
 * {@code writer=python}) goes to the Python data source of the same name, which Spark no longer
 * finds by itself once this jar is on the classpath (a {@code DataSourceRegister} wins the name).
 */
final class AffinityTable implements SupportsRead, SupportsWrite {
  private static final Set<TableCapability> WRITES =
      EnumSet.of(TableCapability.BATCH_WRITE, TableCapability.STREAMING_WRITE);

  private final StructType schema;
  private final Transform[] partitioning;
  private final Map<String, String> properties;
  private final AffinityProvider provider;
  private Table python;

  AffinityTable(StructType schema, Transform[] partitioning, Map<String, String> properties,
      AffinityProvider provider) {
    this.schema = schema;
    this.partitioning = partitioning;
    this.properties = properties;
    this.provider = provider;
  }

  /** The Python data source's table (created on first use). */
  private Table python() {
    if (python == null) {
      python = provider.python().getTable(schema, partitioning, properties);
    }
    return python;
  }

  @Override
  public String name() {
    return AffinityProvider.NAME;
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    Set<TableCapability> all = EnumSet.copyOf(WRITES);
    try {
      all.addAll(python().capabilities());
    } catch (RuntimeException error) {
      // No Python data source in this session (a JVM-only application): writes only.
    }
    return all;
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    Table table = python();
    if (!(table instanceof SupportsRead)) {
      throw new SparkOptionException("the affinity source is the Python data source, and it cannot read here");
    }
    return ((SupportsRead) table).newScanBuilder(options);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    if (!jvmWrites(info.options())) {
      // The Python writer checks its options itself, with its own errors.
      Table table = python();
      if (!(table instanceof SupportsWrite)) {
        throw new SparkOptionException("the Python writer of affinity is not available in this session");
      }
      return ((SupportsWrite) table).newWriteBuilder(info);
    }
    SinkOptions options = SinkOptions.parse(info.options());
    if (!options.jvmWritable()) {
      throw new SparkOptionException("option writer='jvm' writes group mode with value arrow or binary; "
          + "channel mode and value=json are written by the Python writer (writer=auto or python)");
    }
    if (Native.loadFailure() != null) {
      throw new SparkOptionException("option writer='jvm': the affinity native library did not load: "
          + Native.loadFailure());
    }
    return new AffinityWrite(new WriteSpec(options, info.schema(), info.queryId()));
  }

  /**
   * Whether the JVM writer takes this write (docs/spark.md "Two writers"): {@code writer=jvm}, or
   * an unknown {@code writer} value (refused by its parser); {@code writer=auto} (the default) for
   * group mode with {@code value} arrow or binary, when the native library is loaded.
   */
  static boolean jvmWrites(Map<String, String> options) {
    String writer = option(options, "writer", "auto");
    if (writer.equals("python")) {
      return false;
    }
    if (!writer.equals("auto")) {
      return true;
    }
    return !option(options, "group", "").isEmpty() && !option(options, "value", "arrow").equals("json")
        && Native.loadFailure() == null;
  }

  private static String option(Map<String, String> options, String name, String otherwise) {
    for (Map.Entry<String, String> entry : options.entrySet()) {
      if (entry.getKey().equalsIgnoreCase(name) && entry.getValue() != null) {
        return entry.getValue().strip().toLowerCase(java.util.Locale.ROOT);
      }
    }
    return otherwise;
  }
}
