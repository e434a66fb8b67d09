package affinity.spark;

import java.io.Serializable;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The sink's options, parsed and validated on the Spark driver with the rules and messages of
 * {@code python/affinity/spark/options.py} (the names, defaults and limits are that module's;
 * {@code tests/test_spark_jvm.py} checks that both writers refuse the same options with the same
 * messages).
 */
final class SinkOptions implements Serializable {
  private static final long serialVersionUID = 1L;

  /** Default of {@code maxBatchBytes}. */
  static final int DEFAULT_MAX_BATCH_BYTES = 1024 * 1024;
  /** Upper bound of {@code maxBatchBytes}: a message must fit the transport's largest message. */
  static final int MAX_BATCH_BYTES_LIMIT = 2 * 1024 * 1024 - 4096;
  /** Lower bound of {@code maxBatchBytes}. */
  static final int MIN_BATCH_BYTES = 1024;
  /** Default of {@code maxBatchRows}. */
  static final int DEFAULT_MAX_BATCH_ROWS = 10_000;
  /** Upper bound of {@code maxBatchRows}. */
  static final int MAX_BATCH_ROWS_LIMIT = 10_000_000;
  /** Default of {@code ackTimeout}, in milliseconds. */
  static final long DEFAULT_ACK_TIMEOUT_MS = 60_000;
  /** Upper bound of {@code ackTimeout} in seconds (one day). */
  static final double MAX_ACK_TIMEOUT_S = 86_400.0;

  /** The sink options, in the order of the Python module's {@code OPTIONS}. */
  static final List<String> SINK_OPTIONS = Arrays.asList("group", "channel", "streamId", "key", "value",
      "driverDir", "maxBatchRows", "maxBatchBytes", "ackTimeout", "registry", "host", "control", "bootstrap",
      "writer");
  /** Options only the source takes. */
  static final List<String> SOURCE_ONLY = Arrays.asList("index", "count", "failOnDataLoss");
  /** Options Spark itself may add; accepted and ignored. */
  static final List<String> SPARK_INJECTED = Arrays.asList("path", "checkpointlocation", "queryname");
  /** Values of the {@code value} option. */
  static final List<String> VALUE_FORMATS = Arrays.asList("arrow", "json", "binary");
  /** Values of the {@code writer} option. */
  static final List<String> WRITERS = Arrays.asList("auto", "jvm", "python");

  /**
   * The duration grammar of {@code affinity.units} ({@code rust/crates/core/src/units.rs}), which the
   * Python writer parses with: a number ({@code 2}, {@code 1.5}, {@code .5}) and a unit ns, us, ms, s,
   * m or h in any case, nothing between them; a bare number is in seconds.
   */
  private static final Pattern DURATION =
      Pattern.compile("^(\\d+|\\d*\\.\\d+)(ns|us|ms|s|m|h)?$", Pattern.CASE_INSENSITIVE);
  /** Most digits a duration's number may have (the grammar's {@code MAX_DIGITS}). */
  private static final int MAX_DURATION_DIGITS = 30;
  /** A duration is a whole number of nanoseconds below this (2^64). */
  private static final BigInteger DURATION_NANOS_LIMIT = BigInteger.ONE.shiftLeft(64);

  final String group;
  final String channel;
  final String key;
  final List<String> keyColumns;
  final String value;
  final int maxBatchRows;
  final int maxBatchBytes;
  final long ackTimeoutMillis;
  final String ackTimeoutText;
  final String registry;
  /** The address the group member advertises ({@code host}), or null: {@code $SPARK_LOCAL_IP}, else the group's. */
  final String host;
  /** An extra heartbeat channel ({@code control}), or null. */
  final String control;
  /** Members to ask for the group's definition and members ({@code bootstrap}, {@code host:port,...}), or null. */
  final String bootstrap;
  final String writer;
  /** The standalone driver's directory ({@code driverDir}), or null: {@code $AFFINITY_DIR}, else embedded. */
  final String driverDir;

  private SinkOptions(Map<String, String> values) {
    group = text(values, "group");
    channel = text(values, "channel");
    Long streamId = integer(values, "streamId", Integer.MIN_VALUE, Integer.MAX_VALUE, "");
    if (group != null && (channel != null || streamId != null)) {
      String other = channel != null ? "channel=" + repr(channel) : "streamId=" + streamId;
      throw new SparkOptionException("option group=" + repr(group) + " cannot be combined with " + other
          + ": give one target");
    }
    if (group == null) {
      if (channel == null && streamId == null) {
        throw new SparkOptionException("no target: give option group, or options channel and streamId");
      }
      if (channel == null) {
        throw new SparkOptionException("option streamId=" + streamId + " needs option channel");
      }
      if (streamId == null) {
        throw new SparkOptionException("option channel=" + repr(channel) + " needs option streamId");
      }
    }
    String keyRaw = values.get("key");
    List<String> columns = new ArrayList<>();
    if (keyRaw != null) {
      for (String part : keyRaw.split(",", -1)) {
        columns.add(part.strip());
      }
      if (columns.stream().anyMatch(String::isEmpty)) {
        throw new SparkOptionException("option key=" + repr(keyRaw) + " has an empty column name");
      }
      if (new HashSet<>(columns).size() != columns.size()) {
        throw new SparkOptionException("option key=" + repr(keyRaw) + " names a column twice");
      }
    }
    if (group != null && columns.isEmpty()) {
      throw new SparkOptionException("option group=" + repr(group)
          + " needs option key (the column(s) rows are routed by)");
    }
    if (group == null && !columns.isEmpty()) {
      throw new SparkOptionException("option key=" + repr(keyRaw)
          + " applies only with option group (a channel has no keys)");
    }
    key = keyRaw;
    keyColumns = columns;
    Long rows = integer(values, "maxBatchRows", 1, MAX_BATCH_ROWS_LIMIT, " rows");
    Long size = integer(values, "maxBatchBytes", MIN_BATCH_BYTES, MAX_BATCH_BYTES_LIMIT,
        " bytes (a message must fit the transport's)");
    value = choice(values, "value", VALUE_FORMATS);
    maxBatchRows = rows == null ? DEFAULT_MAX_BATCH_ROWS : rows.intValue();
    maxBatchBytes = size == null ? DEFAULT_MAX_BATCH_BYTES : size.intValue();
    ackTimeoutText = values.get("acktimeout");
    ackTimeoutMillis = duration(values, "ackTimeout", DEFAULT_ACK_TIMEOUT_MS);
    registry = text(values, "registry");
    host = text(values, "host");
    control = text(values, "control");
    bootstrap = text(values, "bootstrap");
    if (group == null) {
      for (String name : Arrays.asList("host", "control", "bootstrap")) {
        String given = text(values, name);
        if (given != null) {
          throw new SparkOptionException("option " + name + "=" + repr(given)
              + " applies only with option group (a channel has no members)");
        }
      }
    }
    writer = choice(values, "writer", WRITERS);
    driverDir = text(values, "driverDir");
  }

  /** Validates Spark's option map (case-insensitive keys); {@link SparkOptionException} names the option. */
  static SinkOptions parse(Map<String, String> options) {
    Map<String, String> values = new java.util.HashMap<>();
    for (Map.Entry<String, String> entry : options.entrySet()) {
      String lower = entry.getKey().toLowerCase(Locale.ROOT);
      if (SPARK_INJECTED.contains(lower)) {
        continue;
      }
      String name = find(SINK_OPTIONS, lower);
      if (name == null) {
        String source = find(SOURCE_ONLY, lower);
        if (source != null) {
          throw new SparkOptionException("option " + source + "=" + repr(entry.getValue())
              + " does not apply to the sink");
        }
        throw new SparkOptionException("unknown sink option " + entry.getKey() + "=" + repr(entry.getValue())
            + " (known: " + String.join(", ", SINK_OPTIONS) + ")");
      }
      if (entry.getValue() == null) {
        throw new SparkOptionException("option " + name + " has no value");
      }
      values.put(lower, entry.getValue());
    }
    return new SinkOptions(values);
  }

  /** Whether this JVM writer writes these options (else the Python writer does: channel mode and json). */
  boolean jvmWritable() {
    return group != null && !value.equals("json");
  }

  private static String find(List<String> names, String lower) {
    for (String name : names) {
      if (name.toLowerCase(Locale.ROOT).equals(lower)) {
        return name;
      }
    }
    return null;
  }

  /** Python's {@code repr} of a string, as the Python writer's messages show values. */
  static String repr(String text) {
    boolean single = text.contains("'") && !text.contains("\"");
    String quote = single ? "\"" : "'";
    StringBuilder out = new StringBuilder(quote);
    for (char c : text.toCharArray()) {
      if (c == '\\') {
        out.append("\\\\");
      } else if (!single && c == '\'') {
        out.append("\\'");
      } else if (c == '\n') {
        out.append("\\n");
      } else if (c == '\t') {
        out.append("\\t");
      } else if (c == '\r') {
        out.append("\\r");
      } else {
        out.append(c);
      }
    }
    return out.append(quote).toString();
  }

  private static String text(Map<String, String> values, String name) {
    String raw = values.get(name.toLowerCase(Locale.ROOT));
    if (raw == null) {
      return null;
    }
    if (raw.strip().isEmpty()) {
      throw new SparkOptionException("option " + name + "=" + repr(raw) + " is empty");
    }
    return raw.strip();
  }

  private static Long integer(Map<String, String> values, String name, long low, long high, String unit) {
    String raw = values.get(name.toLowerCase(Locale.ROOT));
    if (raw == null) {
      return null;
    }
    long number;
    try {
      number = Long.parseLong(raw.strip().replace("_", ""));
    } catch (NumberFormatException error) {
      throw new SparkOptionException("option " + name + "=" + repr(raw) + " is not an integer");
    }
    if (number < low || number > high) {
      throw new SparkOptionException("option " + name + "=" + repr(raw) + " is out of range [" + low + ", "
          + high + "]" + unit);
    }
    return number;
  }

  private static long duration(Map<String, String> values, String name, long defaultMillis) {
    String raw = values.get(name.toLowerCase(Locale.ROOT));
    if (raw == null) {
      return defaultMillis;
    }
    BigDecimal nanos = durationNanos(raw.strip());
    if (nanos == null) {
      throw new SparkOptionException("option " + name + "=" + repr(raw)
          + " is not a duration (examples: 30, 30s, 500ms, 2m)");
    }
    double seconds = nanos.doubleValue() / 1e9;
    if (!(seconds > 0.0 && seconds <= MAX_ACK_TIMEOUT_S)) {
      throw new SparkOptionException("option " + name + "=" + repr(raw) + " must be more than 0s and at most "
          + String.format(Locale.ROOT, "%.0f", MAX_ACK_TIMEOUT_S) + "s (one day)");
    }
    return Math.max(1L, Math.round(seconds * 1000.0));
  }

  /**
   * The nanoseconds {@code text} names in the {@link #DURATION} grammar, or null when it is not one:
   * not the grammar, more than {@link #MAX_DURATION_DIGITS} digits, finer than a nanosecond, or not
   * below 2^64 nanoseconds (what {@code affinity.units.parse_duration} refuses).
   */
  private static BigDecimal durationNanos(String text) {
    Matcher match = DURATION.matcher(text);
    if (!match.matches() || match.group(1).replace(".", "").length() > MAX_DURATION_DIGITS) {
      return null;
    }
    String unit = match.group(2) == null ? "s" : match.group(2).toLowerCase(Locale.ROOT);
    long perUnit;
    switch (unit) {
      case "ns": perUnit = 1L; break;
      case "us": perUnit = 1_000L; break;
      case "ms": perUnit = 1_000_000L; break;
      case "m": perUnit = 60_000_000_000L; break;
      case "h": perUnit = 3_600_000_000_000L; break;
      default: perUnit = 1_000_000_000L;
    }
    BigDecimal nanos = new BigDecimal(match.group(1)).multiply(BigDecimal.valueOf(perUnit));
    if (nanos.signum() != 0 && nanos.stripTrailingZeros().scale() > 0) {
      return null;
    }
    return nanos.toBigInteger().compareTo(DURATION_NANOS_LIMIT) < 0 ? nanos : null;
  }

  private static String choice(Map<String, String> values, String name, List<String> allowed) {
    String raw = values.getOrDefault(name.toLowerCase(Locale.ROOT), allowed.get(0));
    String lowered = raw.strip().toLowerCase(Locale.ROOT);
    if (!allowed.contains(lowered)) {
      throw new SparkOptionException("option " + name + "=" + repr(raw) + " is not one of "
          + String.join(" | ", allowed));
    }
    return lowered;
  }
}
