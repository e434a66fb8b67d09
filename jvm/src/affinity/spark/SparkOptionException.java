package affinity.spark;

/**
 * A data source option is unknown, missing or malformed, or the DataFrame cannot be written with
 * them; the message names the option and the value (the Python writer's {@code SparkOptionError}).
 */
public final class SparkOptionException extends IllegalArgumentException {
  private static final long serialVersionUID = 1L;

  /** An error whose message names the option. */
  public SparkOptionException(String message) {
    super("SparkOptionError: " + message);
  }
}
