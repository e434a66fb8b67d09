package affinity.spark;

/**
 * A task could not hand its rows over: back-pressure, no consumer or no acknowledgement within
 * {@code ackTimeout}, or a transport failure. The task fails and Spark retries it.
 */
public final class AffinitySinkException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** An error naming the group, queue and state. */
  public AffinitySinkException(String message) {
    super(message);
  }
}
