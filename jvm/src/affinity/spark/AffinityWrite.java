package affinity.spark;

import java.util.HashMap;
import java.util.Map;
import java.util.UUID;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;

/**
 * The JVM writer's plan on the driver: a batch write (batch id 0, the write's query id) or a
 * streaming write (the streaming query's id, the micro-batch id); commit and abort publish the
 * markers to every queue of the group from the driver.
 */
final class AffinityWrite implements WriteBuilder, Write, BatchWrite, StreamingWrite {
  private final WriteSpec spec;
  private final long handle;

  AffinityWrite(WriteSpec spec) {
    Native.require();
    this.spec = spec;
    // Opening checks, here on the driver when the query is planned, that the group exists and
    // that the standalone driver the tasks attach to runs (SparkOptionException naming the option).
    this.handle = Native.openGroup(spec.options);
  }

  @Override
  public Write build() {
    return this;
  }

  @Override
  public String description() {
    return "affinity JVM writer to group " + spec.options.group;
  }

  @Override
  public BatchWrite toBatch() {
    return this;
  }

  @Override
  public StreamingWrite toStreaming() {
    return this;
  }

  /** Creates the batch tasks' writers. */
  private static final class BatchFactory implements DataWriterFactory {
    private static final long serialVersionUID = 1L;
    private final WriteSpec spec;

    BatchFactory(WriteSpec spec) {
      this.spec = spec;
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
      return new AffinityDataWriter(spec, partitionId, 0);
    }
  }

  /** Creates the streaming tasks' writers. */
  private static final class StreamFactory implements StreamingDataWriterFactory {
    private static final long serialVersionUID = 1L;
    private final WriteSpec spec;

    StreamFactory(WriteSpec spec) {
      this.spec = spec;
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId, long epochId) {
      return new AffinityDataWriter(spec, partitionId, epochId);
    }
  }

  @Override
  public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
    return new BatchFactory(spec);
  }

  @Override
  public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
    return new StreamFactory(spec);
  }

  @Override
  public boolean useCommitCoordinator() {
    return true;
  }

  @Override
  public void commit(WriterCommitMessage[] messages) {
    markers(Envelope.COMMIT, 0, messages);
  }

  @Override
  public void abort(WriterCommitMessage[] messages) {
    markers(Envelope.ABORT, 0, messages);
  }

  @Override
  public void commit(long epochId, WriterCommitMessage[] messages) {
    markers(Envelope.COMMIT, epochId, messages);
  }

  @Override
  public void abort(long epochId, WriterCommitMessage[] messages) {
    markers(Envelope.ABORT, epochId, messages);
  }

  /** A commit or abort marker to every queue (commit: each queue's last sequence per partition). */
  private void markers(byte kind, long batchId, WriterCommitMessage[] messages) {
    long since = Profile.now();
    int queueCount = Native.queueCount(handle);
    Map<Integer, Map<Integer, Long>> perQueue = new HashMap<>();
    for (int q = 0; q < queueCount; q++) {
      perQueue.put(q, new HashMap<>());
    }
    for (WriterCommitMessage message : messages) {
      if (message instanceof TaskResult) {
        TaskResult task = (TaskResult) message;
        for (Map.Entry<Integer, Long> entry : task.lastSequences.entrySet()) {
          Map<Integer, Long> queue = perQueue.get(entry.getKey());
          if (queue != null) {
            queue.put(task.partition, entry.getValue());
          }
        }
      }
    }
    UUID query = UUID.fromString(spec.queryId);
    long[] published = new long[queueCount];
    for (int q = 0; q < queueCount; q++) {
      byte[] marker = Envelope.marker(kind, query, batchId, perQueue.get(q));
      published[q] = Native.publish(handle, q, marker, marker.length, spec.options.ackTimeoutMillis);
    }
    long sent = Profile.now();
    boolean acked = Native.flushTo(handle, published, spec.options.ackTimeoutMillis);
    Profile.printMarkers(batchId, kind == Envelope.COMMIT, since, sent);
    if (!acked) {
      throw new AffinitySinkException("group " + SinkOptions.repr(spec.options.group) + ": the "
          + (kind == Envelope.COMMIT ? "commit" : "abort") + " markers of batch " + batchId
          + " are unacknowledged after ackTimeout");
    }
  }
}
