package affinity.spark;

import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

/** What one write task sent: the content of the commit markers (as the Python writer's). */
final class TaskResult implements WriterCommitMessage {
  private static final long serialVersionUID = 1L;

  final String queryId;
  final long batchId;
  final int partition;
  long rows;
  long messages;
  /** queue -> envelope sequence of the last message this task sent to it. */
  final Map<Integer, Long> lastSequences = new HashMap<>();

  TaskResult(String queryId, long batchId, int partition) {
    this.queryId = queryId;
    this.batchId = batchId;
    this.partition = partition;
  }
}
