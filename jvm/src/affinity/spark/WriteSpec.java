package affinity.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Everything a write task needs, decided on the driver when the query is planned: the validated
 * options, the rows' schema, the key and value columns and the session's Arrow settings.
 */
final class WriteSpec implements Serializable {
  private static final long serialVersionUID = 1L;
  /**
   * Session setting choosing how the JVM writer builds Arrow messages (a testing and measuring aid,
   * docs/spark.md "Two writers"): {@code columns} (the default: flat-typed row groups filled column
   * by column and encoded straight into the message), {@code rows} (filled row by row into the
   * vectors, encoded by Arrow's {@code ArrowStreamWriter}) or {@code spark} (every row group
   * through Spark's {@code ArrowWriter} and Arrow's {@code ArrowStreamWriter}). The bytes sent are
   * the same Arrow IPC stream whichever is chosen.
   */
  static final String FILL_CONF = "spark.affinity.jvm.fill";
  /** The values of {@link #FILL_CONF}, in its order: an index is a {@link #fill}. */
  static final List<String> FILLS = List.of("columns", "rows", "spark");
  static final int FILL_COLUMNS = 0;
  static final int FILL_ROWS = 1;
  static final int FILL_SPARK = 2;
  /** Rows per routing chunk when {@code spark.sql.execution.arrow.maxRecordsPerBatch} is not positive. */
  static final int DEFAULT_CHUNK_ROWS = 10_000;

  final SinkOptions options;
  final StructType schema;
  final int[] keyOrdinals;
  final int valueOrdinal;
  final String queryId;
  final String timeZone;
  final boolean largeVarTypes;
  /** Rows routed per native call (Spark hands a Python writer Arrow batches of this many rows). */
  final int chunkRows;
  /** How Arrow messages are built: an index of {@link #FILLS} ({@link #FILL_CONF}). */
  final int fill;

  WriteSpec(SinkOptions options, StructType schema, String queryId) {
    this.options = options;
    this.schema = schema;
    this.queryId = queryId;
    List<String> names = List.of(schema.fieldNames());
    keyOrdinals = new int[options.keyColumns.size()];
    for (int i = 0; i < keyOrdinals.length; i++) {
      String name = options.keyColumns.get(i);
      int ordinal = names.indexOf(name);
      if (ordinal < 0) {
        throw new SparkOptionException("option key=" + SinkOptions.repr(String.join(",", options.keyColumns))
            + ": column " + SinkOptions.repr(name) + " is not in " + pyList(names));
      }
      DataType type = schema.fields()[ordinal].dataType();
      if (!keyTypeOk(type)) {
        throw new SparkOptionException("option key=" + SinkOptions.repr(String.join(",", options.keyColumns))
            + ": column " + SinkOptions.repr(name) + " has type " + type.simpleString()
            + "; key columns must be string, binary or integer");
      }
      keyOrdinals[i] = ordinal;
    }
    int value = -1;
    if (options.value.equals("binary")) {
      List<String> candidates = new ArrayList<>();
      for (StructField field : schema.fields()) {
        if (!options.keyColumns.contains(field.name()) && field.dataType() instanceof BinaryType) {
          candidates.add(field.name());
        }
      }
      if (candidates.size() != 1) {
        throw new SparkOptionException("option value='binary' needs exactly one binary column besides the key; found "
            + (candidates.isEmpty() ? "none" : pyList(candidates)) + " in " + pyList(names));
      }
      value = names.indexOf(candidates.get(0));
    }
    valueOrdinal = value;
    SQLConf conf = SQLConf.get();
    timeZone = conf.sessionLocalTimeZone();
    largeVarTypes = conf.arrowUseLargeVarTypes();
    int perBatch = conf.arrowMaxRecordsPerBatch();
    chunkRows = perBatch > 0 ? perBatch : DEFAULT_CHUNK_ROWS;
    String fillName = conf.getConfString(FILL_CONF, FILLS.get(FILL_COLUMNS));
    fill = FILLS.indexOf(fillName);
    if (fill < 0) {
      throw new SparkOptionException(FILL_CONF + "=" + SinkOptions.repr(fillName) + ": must be one of " + pyList(FILLS));
    }
  }

  static boolean keyTypeOk(DataType type) {
    return type instanceof StringType || type instanceof BinaryType || type instanceof LongType
        || type instanceof IntegerType || type instanceof ShortType || type instanceof ByteType;
  }

  /** A Python list of strings, as the Python writer's messages show column names. */
  static String pyList(List<String> names) {
    List<String> quoted = new ArrayList<>();
    for (String name : names) {
      quoted.add(SinkOptions.repr(name));
    }
    return "[" + String.join(", ", quoted) + "]";
  }
}
