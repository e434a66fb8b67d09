package affinity.spark;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.WritableByteChannel;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.UUID;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamWriter;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One task's writer: rows are routed in chunks of {@link WriteSpec#chunkRows} (the queue of every
 * key computed in Rust in one call); each row goes, in order, into its queue's row group of at
 * most {@code maxBatchRows} rows / {@code maxBatchBytes} bytes (Arrow with at most
 * {@link #MAX_OPEN_GROUPS} queues: one open group per queue across chunks, so messages are
 * full-sized; else grouped per chunk), which is encoded (Arrow
 * IPC stream of one batch, or {@code binary}), wrapped in the envelope and published. The
 * envelope sequence depends only on the partition's rows and the options, so a retried attempt
 * numbers the same rows the same way. {@link #commit} returns once every message of this task is
 * acknowledged (the JVM's publisher is shared by its concurrent tasks: each waits for its own).
 */
final class AffinityDataWriter implements DataWriter<InternalRow> {
  /** Share of {@code maxBatchBytes} a row group is sized for before encoding (IPC framing, schema). */
  static final double SIZE_HEADROOM = 0.9;
  /** Rows between two checks of a row group's Arrow size. */
  static final int SIZE_CHECK_ROWS = 16;
  /** Bytes of open Arrow row groups (all queues) above which they are all sent and freed. */
  static final long MAX_BUFFERED_BYTES = 32L << 20;
  /**
   * Most queues an Arrow-mode task keeps a row group open for across chunks (each holds its own
   * Arrow vectors); a group with more queues has its row groups cut per chunk, in one writer.
   */
  static final int MAX_OPEN_GROUPS = 64;
  /**
   * Rows per routing chunk when each queue's row group stays open across chunks (Arrow mode, at
   * most {@link #MAX_OPEN_GROUPS} queues): the messages do not depend on it, and a chunk this small
   * keeps its row bytes ({@link #arena}, about 64 bytes a row of five columns) in the core's cache
   * between their copy and the fill. Otherwise a chunk is {@link WriteSpec#chunkRows} rows (each
   * chunk's rows are cut into messages).
   */
  static final int OPEN_GROUPS_CHUNK_ROWS = 1024;
  /** Initial bytes of the direct buffer Arrow messages are encoded into (grown as needed). */
  static final int INITIAL_DIRECT_BYTES = 256 * 1024;
  /** Initial bytes of {@link #arena}. */
  static final int INITIAL_ARENA_BYTES = 64 * 1024;
  private static final byte[] NULL_LENGTH = {(byte) 0xFF, (byte) 0xFF, (byte) 0xFF, (byte) 0xFF};

  private final WriteSpec spec;
  private final SinkOptions options;
  private final long handle;
  private final int queueCount;
  private final UUID query;
  private final long batchId;
  private final int partition;
  private final byte format;
  private final TaskResult result;
  private final DataType[] keyTypes;
  /** queue -> group sequence of the last message this task published to it (what commit waits for). */
  private final long[] published;

  private final InternalRow[] rows;
  /**
   * The bytes of the chunk's rows (when Spark hands {@link UnsafeRow}s, as its generated code
   * does): one array reused chunk after chunk instead of a new copy of each row.
   */
  private byte[] arena = new byte[INITIAL_ARENA_BYTES];
  private int arenaLength;
  /**
   * Whether direct-path row groups take the chunk's rows column by column ({@link ArrowGroup#writeRows}):
   * the {@code columns} fill ({@link WriteSpec#FILL_CONF}) and every row of the chunk so far an
   * {@link UnsafeRow} of the schema's fields (kept in {@link #arena}); else row by row.
   */
  private boolean columnFill;
  /** Per chunk slot, a reusable {@link UnsafeRow} pointing into {@link #arena}. */
  private final UnsafeRow[] views;
  private final int[] ends;
  private final int[] queues;
  /** The chunk's rows by queue ({@link #byQueue}): row indices, each queue's first index, a cursor per queue. */
  private final int[] runOrder;
  private final int[] runStarts;
  private final int[] runNext;
  private byte[] keys = new byte[64 * 1024];
  private int keyLength;
  private int count;
  private long sequence;
  /**
   * queue -> the Arrow row group being filled for it (created when the task first reaches the
   * queue); with more than {@link #MAX_OPEN_GROUPS} queues only {@code groups[0]}, shared.
   */
  private final ArrowGroup[] groups;
  /** queue -> rows in its open row group. */
  private final int[] groupRows;
  private final Buffer out = new Buffer();
  /** Arrow messages: encoded into direct memory that the native publish reads in place. */
  private final DirectOut direct = new DirectOut();
  private final byte[] header = new byte[Envelope.HEADER_LENGTH];
  private final Profile profile = Profile.ON ? new Profile() : null;

  /** A growable byte array whose contents are published without a copy. */
  private static final class Buffer extends ByteArrayOutputStream {
    Buffer() {
      super(256 * 1024);
    }

    byte[] array() {
      return buf;
    }
  }

  /**
   * A growable direct buffer the Arrow IPC stream is written into (one bulk copy from each Arrow
   * buffer) and published from without a copy into the Java heap or a temporary native buffer.
   */
  static final class DirectOut implements WritableByteChannel {
    private ByteBuffer buffer = ByteBuffer.allocateDirect(INITIAL_DIRECT_BYTES).order(ByteOrder.LITTLE_ENDIAN);

    /** Empties the buffer and leaves {@code position} bytes (the envelope) before what is written next. */
    void reset(int position) {
      buffer.clear();
      buffer.position(position);
    }

    /** The buffer: {@code [0, size())} is the message. */
    ByteBuffer buffer() {
      return buffer;
    }

    int size() {
      return buffer.position();
    }

    /**
     * The buffer, with room for {@code length} more bytes after its position (grown, keeping what
     * it holds, as needed); little-endian.
     */
    ByteBuffer reserve(long length) {
      if (length > buffer.remaining()) {
        long needed = (long) buffer.position() + length;
        if (needed > Integer.MAX_VALUE - 8) {
          throw new AffinitySinkException("an Arrow message of more than 2 GiB");
        }
        ByteBuffer bigger = ByteBuffer.allocateDirect((int) Math.min(Integer.MAX_VALUE - 8,
            Math.max(2L * buffer.capacity(), needed))).order(ByteOrder.LITTLE_ENDIAN);
        buffer.flip();
        bigger.put(buffer);
        buffer = bigger;
      }
      return buffer;
    }

    @Override
    public int write(ByteBuffer source) {
      int length = source.remaining();
      reserve(length).put(source);
      return length;
    }

    @Override
    public boolean isOpen() {
      return true;
    }

    @Override
    public void close() {}
  }

  AffinityDataWriter(WriteSpec spec, int partition, long batchId) {
    Native.require();
    this.spec = spec;
    this.options = spec.options;
    this.handle = Native.openGroup(options);
    this.queueCount = Native.queueCount(handle);
    this.query = UUID.fromString(spec.queryId);
    this.batchId = batchId;
    this.partition = partition;
    this.format = Envelope.formatCode(options.value);
    this.result = new TaskResult(spec.queryId, batchId, partition);
    this.columnFill = spec.fill == WriteSpec.FILL_COLUMNS;
    int chunk = format == 2 || queueCount > MAX_OPEN_GROUPS ? spec.chunkRows
        : Math.min(spec.chunkRows, OPEN_GROUPS_CHUNK_ROWS);
    this.rows = new InternalRow[chunk];
    this.views = new UnsafeRow[chunk];
    this.ends = new int[chunk];
    this.queues = new int[chunk];
    this.runOrder = new int[chunk];
    this.runStarts = new int[queueCount + 1];
    this.runNext = new int[queueCount];
    this.published = new long[queueCount];
    this.groups = new ArrowGroup[queueCount];
    this.groupRows = new int[queueCount];
    this.keyTypes = new DataType[spec.keyOrdinals.length];
    for (int i = 0; i < keyTypes.length; i++) {
      keyTypes[i] = spec.schema.fields()[spec.keyOrdinals[i]].dataType();
    }
  }

  @Override
  public void write(InternalRow row) throws IOException {
    boolean sampled = profile != null && (count & (Profile.ROW_SAMPLE - 1)) == 0;
    long since = sampled ? System.nanoTime() : 0;
    if (spec.keyOrdinals.length == 1) {
      appendKey(row, 0, false);
    } else {
      for (int i = 0; i < spec.keyOrdinals.length; i++) {
        appendKey(row, i, true);
      }
    }
    ends[count] = keyLength;
    rows[count] = keep(row);
    count++;
    if (sampled) {
      profile.addSample(Profile.Phase.ROWS, since);
    }
    if (count == rows.length) {
      sendChunk();
    }
  }

  @Override
  public WriterCommitMessage commit() throws IOException {
    sendChunk();
    emitAll();
    long since = Profile.now();
    boolean acked = Native.flushTo(handle, published, options.ackTimeoutMillis);
    if (profile != null) {
      profile.add(Profile.Phase.FLUSH, since);
      profile.print(partition, batchId, result.rows, result.messages);
    }
    if (!acked) {
      throw new AffinitySinkException("group " + SinkOptions.repr(options.group)
          + ": messages still unacknowledged after ackTimeout=" + ackTimeoutText()
          + " (consumers slow or gone); the task fails so Spark can retry it");
    }
    return result;
  }

  private String ackTimeoutText() {
    return options.ackTimeoutText != null ? options.ackTimeoutText.strip() : (options.ackTimeoutMillis / 1000) + "s";
  }

  @Override
  public void abort() {
    // What was published stays with the group until acknowledged; the driver sends the abort marker.
    count = 0;
    keyLength = 0;
    arenaLength = 0;
    Arrays.fill(groupRows, 0);
  }

  @Override
  public void close() {
    closeGroups();
    Arrays.fill(rows, null);
  }

  /**
   * The row, kept until its chunk is sent (Spark reuses the object it hands {@link #write}): an
   * {@link UnsafeRow}'s bytes go into {@link #arena} behind this slot's view, any other row is copied.
   */
  private InternalRow keep(InternalRow row) {
    if (!(row instanceof UnsafeRow)) {
      columnFill = false;
      return row.copy();
    }
    UnsafeRow unsafe = (UnsafeRow) row;
    if (unsafe.numFields() != spec.schema.length()) {
      columnFill = false; // not laid out as the schema's row (ArrowGroup.writeRows reads that layout)
    }
    int size = unsafe.getSizeInBytes();
    if (size > arena.length - arenaLength) {
      // A new array for this row and the chunk's next ones; the rows kept so far keep the old one alive.
      arena = new byte[(int) Math.min(Integer.MAX_VALUE - 8, Math.max(2L * arena.length, size))];
      arenaLength = 0;
    }
    UnsafeRow view = views[count];
    if (view == null || view.numFields() != unsafe.numFields()) {
      view = new UnsafeRow(unsafe.numFields());
      views[count] = view;
    }
    unsafe.writeToMemory(arena, Platform.BYTE_ARRAY_OFFSET + arenaLength);
    view.pointTo(arena, Platform.BYTE_ARRAY_OFFSET + arenaLength, size);
    arenaLength += size;
    return view;
  }

  // ---- keys ----

  private void ensureKeys(int more) {
    if (keyLength + more > keys.length) {
      keys = Arrays.copyOf(keys, Math.max(keys.length * 2, keyLength + more));
    }
  }

  private void putKeyBytes(byte[] bytes, boolean prefixed) {
    ensureKeys(bytes.length + 4);
    if (prefixed) {
      putLength(bytes.length);
    }
    System.arraycopy(bytes, 0, keys, keyLength, bytes.length);
    keyLength += bytes.length;
  }

  private void putLength(int length) {
    keys[keyLength] = (byte) length;
    keys[keyLength + 1] = (byte) (length >>> 8);
    keys[keyLength + 2] = (byte) (length >>> 16);
    keys[keyLength + 3] = (byte) (length >>> 24);
    keyLength += 4;
  }

  /** The routing key bytes of one column (docs/spark.md "Keys"; encoding.py's key_array). */
  private void appendKey(InternalRow row, int index, boolean prefixed) {
    int ordinal = spec.keyOrdinals[index];
    if (row.isNullAt(ordinal)) {
      if (prefixed) {
        ensureKeys(4);
        System.arraycopy(NULL_LENGTH, 0, keys, keyLength, 4);
        keyLength += 4;
      }
      return;
    }
    DataType type = keyTypes[index];
    byte[] bytes;
    if (type instanceof StringType) {
      // Straight from the row into the chunk's key bytes: no byte[] (nor, from an UnsafeRow, a
      // UTF8String) per row.
      Object base;
      long offset;
      int length;
      if (row instanceof UnsafeRow) {
        UnsafeRow unsafe = (UnsafeRow) row;
        long offsetAndSize = unsafe.getLong(ordinal);
        base = unsafe.getBaseObject();
        offset = unsafe.getBaseOffset() + (offsetAndSize >>> 32);
        length = (int) offsetAndSize;
      } else {
        UTF8String text = row.getUTF8String(ordinal);
        base = text.getBaseObject();
        offset = text.getBaseOffset();
        length = text.numBytes();
      }
      ensureKeys(length + 4);
      if (prefixed) {
        putLength(length);
      }
      ArrowGroup.copy(base, offset, keys, Platform.BYTE_ARRAY_OFFSET + keyLength, length);
      keyLength += length;
      return;
    }
    if (type instanceof BinaryType) {
      bytes = row.getBinary(ordinal);
    } else if (type instanceof IntegerType) {
      bytes = Integer.toString(row.getInt(ordinal)).getBytes(StandardCharsets.US_ASCII);
    } else if (type instanceof ShortType) {
      bytes = Short.toString(row.getShort(ordinal)).getBytes(StandardCharsets.US_ASCII);
    } else if (type instanceof ByteType) {
      bytes = Byte.toString(row.getByte(ordinal)).getBytes(StandardCharsets.US_ASCII);
    } else {
      bytes = Long.toString(row.getLong(ordinal)).getBytes(StandardCharsets.US_ASCII);
    }
    putKeyBytes(bytes, prefixed);
  }

  // ---- chunks ----

  private void sendChunk() throws IOException {
    if (count == 0) {
      return;
    }
    long since = Profile.now();
    Native.queuesOf(handle, keys, ends, count, queues);
    if (profile != null) {
      profile.add(Profile.Phase.ROUTE, since);
    }
    if (format == 2 || queueCount > MAX_OPEN_GROUPS) {
      sendChunkByQueue();
    } else {
      fillArrow();
    }
    Arrays.fill(rows, 0, count, null);
    count = 0;
    keyLength = 0;
    arenaLength = 0;
    columnFill = spec.fill == WriteSpec.FILL_COLUMNS;
  }

  /**
   * Binary mode, and Arrow mode with more than {@link #MAX_OPEN_GROUPS} queues: the chunk's rows
   * grouped by queue (stable), each queue's cut into messages.
   */
  private void sendChunkByQueue() throws IOException {
    int[] order = byQueue();
    for (int q = 0; q < queueCount; q++) {
      if (runStarts[q] == runStarts[q + 1]) {
        continue;
      }
      if (format == 2) {
        sendBinary(q, order, runStarts[q], runStarts[q + 1]);
      } else {
        sendArrowRun(q, order, runStarts[q], runStarts[q + 1]);
      }
    }
  }

  /** Rows {@code order[from..to)} of the chunk, all of {@code queue}, as Arrow row groups (one writer for all queues). */
  private void sendArrowRun(int queue, int[] order, int from, int to) throws IOException {
    if (groups[0] == null) {
      groups[0] = ArrowGroup.create(spec);
    }
    ArrowGroup group = groups[0];
    int left = fillRun(queue, group, order, from, to, 0, (long) (options.maxBatchBytes * SIZE_HEADROOM));
    if (left > 0) {
      emitArrow(queue, group);
    }
  }

  /**
   * Writes rows {@code order[from..to)}, all of {@code queue}, into {@code group}, which holds
   * {@code rowsInGroup} rows already, sending it to {@code queue} whenever it holds {@code
   * maxBatchRows} rows or about {@code budget} bytes; returns the rows left in it.
   */
  private int fillRun(int queue, ArrowGroup group, int[] order, int from, int to, int rowsInGroup, long budget)
      throws IOException {
    long since = Profile.now();
    boolean byColumn = columnFill && group.direct();
    for (int k = from; k < to; ) {
      if (byColumn) {
        int n = group.rowsUntilFull(rows, order, k, to, options.maxBatchRows, budget);
        group.writeRows(rows, order, k, k + n);
        k += n;
        rowsInGroup += n;
      } else {
        group.write(rows[order[k]]);
        k++;
        rowsInGroup++;
      }
      if (rowsInGroup >= options.maxBatchRows
          || (rowsInGroup % SIZE_CHECK_ROWS == 0 && group.sizeInBytes() >= budget)) {
        if (profile != null) {
          profile.add(Profile.Phase.FILL, since);
        }
        emitArrow(queue, group);
        since = Profile.now();
        rowsInGroup = 0;
      }
    }
    if (profile != null) {
      profile.add(Profile.Phase.FILL, since);
    }
    return rowsInGroup;
  }

  /**
   * Arrow mode: the chunk's rows go, queue by queue and in their order within each queue, into
   * their queue's row group (filling one group at a time keeps its vectors in the cache); a group
   * is sent once it holds {@code maxBatchRows} rows or about {@code maxBatchBytes}, so messages are
   * as large as the options allow whatever the chunk size, and a queue's messages are cut at the
   * same rows whatever the other queues' rows. Groups still open when the buffered total passes
   * {@link #MAX_BUFFERED_BYTES} are sent (and their vectors freed) at once.
   */
  private void fillArrow() throws IOException {
    long budget = (long) (options.maxBatchBytes * SIZE_HEADROOM);
    int[] order = byQueue();
    for (int q = 0; q < queueCount; q++) {
      int from = runStarts[q];
      int to = runStarts[q + 1];
      if (from == to) {
        continue;
      }
      if (groups[q] == null) {
        groups[q] = ArrowGroup.create(spec);
      }
      groupRows[q] = fillRun(q, groups[q], order, from, to, groupRows[q], budget);
    }
    long buffered = 0;
    for (int q = 0; q < queueCount; q++) {
      if (groupRows[q] > 0) {
        buffered += groups[q].sizeInBytes();
      }
    }
    if (buffered > MAX_BUFFERED_BYTES) {
      emitAll();
      closeGroups();
    }
  }

  /**
   * The chunk's row indices ordered by queue, stable (a queue's rows keep their order): queue
   * {@code q}'s rows are {@code order[runStarts[q]..runStarts[q + 1])}.
   */
  private int[] byQueue() {
    int[] starts = runStarts;
    Arrays.fill(starts, 0);
    for (int i = 0; i < count; i++) {
      starts[queues[i] + 1]++;
    }
    for (int q = 0; q < queueCount; q++) {
      starts[q + 1] += starts[q];
    }
    System.arraycopy(starts, 0, runNext, 0, queueCount);
    for (int i = 0; i < count; i++) {
      runOrder[runNext[queues[i]]++] = i;
    }
    return runOrder;
  }

  /** Sends every queue's open row group, in queue order. */
  private void emitAll() throws IOException {
    for (int q = 0; q < queueCount; q++) {
      if (groupRows[q] > 0) {
        emitArrow(q);
      }
    }
  }

  private void closeGroups() {
    for (int q = 0; q < queueCount; q++) {
      if (groups[q] != null) {
        groups[q].close();
        groups[q] = null;
      }
    }
  }

  /** Sends {@code queue}'s open row group. */
  private void emitArrow(int queue) throws IOException {
    emitArrow(queue, groups[queue]);
    groupRows[queue] = 0;
  }

  /** Sends the rows in {@code group} to {@code queue} and empties it. */
  private void emitArrow(int queue, ArrowGroup group) throws IOException {
    group.finish();
    VectorSchemaRoot root = group.root();
    fit(queue, group, root, 0, root.getRowCount());
    group.reset();
  }

  /** Publishes rows [start, start+length) of the row group, halved until each part fits maxBatchBytes. */
  private void fit(int queue, ArrowGroup group, VectorSchemaRoot root, int start, int length) throws IOException {
    if (spec.fill == WriteSpec.FILL_COLUMNS && group.direct() && start == 0 && length == root.getRowCount()) {
      long since = Profile.now();
      direct.reset(Envelope.HEADER_LENGTH);
      group.encode(direct);
      if (profile != null) {
        profile.add(Profile.Phase.ENCODE, since);
      }
      if (direct.size() - Envelope.HEADER_LENGTH <= options.maxBatchBytes || length == 1) {
        fitted(queue, length);
        return;
      }
      int half = length / 2;
      fit(queue, group, root, start, half);
      fit(queue, group, root, start + half, length - half);
      return;
    }
    VectorSchemaRoot part = start == 0 && length == root.getRowCount() ? root : root.slice(start, length);
    try {
      long since = Profile.now();
      direct.reset(Envelope.HEADER_LENGTH);
      ArrowStreamWriter writer = new ArrowStreamWriter(part, null, direct);
      writer.start();
      writer.writeBatch();
      writer.end();
      if (profile != null) {
        profile.add(Profile.Phase.ENCODE, since);
      }
      if (direct.size() - Envelope.HEADER_LENGTH <= options.maxBatchBytes || length == 1) {
        fitted(queue, length);
        return;
      }
    } finally {
      if (part != root) {
        part.close();
      }
    }
    int half = length / 2;
    fit(queue, group, root, start, half);
    fit(queue, group, root, start + half, length - half);
  }

  /** Sends the message of {@code length} rows encoded in {@link #direct}, or refuses one row larger than maxBatchBytes. */
  private void fitted(int queue, int length) {
    int body = direct.size() - Envelope.HEADER_LENGTH;
    if (body > options.maxBatchBytes) {
      throw new SparkOptionException("one row encodes to " + body + " bytes, more than maxBatchBytes="
          + options.maxBatchBytes);
    }
    sendDirect(queue, length);
  }

  private void sendBinary(int queue, int[] order, int from, int to) {
    out.reset();
    out.write(new byte[Envelope.HEADER_LENGTH], 0, Envelope.HEADER_LENGTH);
    int groupRows = 0;
    for (int k = from; k < to; k++) {
      InternalRow row = rows[order[k]];
      if (row.isNullAt(spec.valueOrdinal)) {
        throw new AffinitySinkException("column " + SinkOptions.repr(spec.schema.fields()[spec.valueOrdinal].name())
            + " has null values; binary mode sends bytes");
      }
      byte[] value = row.getBinary(spec.valueOrdinal);
      int size = 4 + value.length;
      if (size > options.maxBatchBytes) {
        throw new SparkOptionException("one row encodes to " + size + " bytes, more than maxBatchBytes="
            + options.maxBatchBytes);
      }
      if (groupRows > 0 && (groupRows >= options.maxBatchRows
          || out.size() - Envelope.HEADER_LENGTH + size > options.maxBatchBytes)) {
        send(queue, groupRows);
        out.reset();
        out.write(new byte[Envelope.HEADER_LENGTH], 0, Envelope.HEADER_LENGTH);
        groupRows = 0;
      }
      out.write(size - 4);
      out.write((size - 4) >>> 8);
      out.write((size - 4) >>> 16);
      out.write((size - 4) >>> 24);
      out.write(value, 0, value.length);
      groupRows++;
    }
    if (groupRows > 0) {
      send(queue, groupRows);
    }
  }

  /** Publishes the message in {@link #out} (its header is written here) as the next in sequence. */
  private void send(int queue, int groupRows) {
    sequence++;
    byte[] message = out.array();
    Envelope.write(message, Envelope.DATA, format, query, batchId, partition, groupRows, sequence);
    // Each message gets the full ackTimeout to get through back-pressure, as in the Python writer.
    long since = Profile.now();
    published[queue] = Native.publish(handle, queue, message, out.size(), options.ackTimeoutMillis);
    sent(queue, groupRows, since);
  }

  /** Publishes the message in {@link #direct} (its header is written here) as the next in sequence. */
  private void sendDirect(int queue, int groupRows) {
    sequence++;
    Envelope.write(header, Envelope.DATA, format, query, batchId, partition, groupRows, sequence);
    ByteBuffer message = direct.buffer();
    message.put(0, header);
    long since = Profile.now();
    published[queue] = Native.publishDirect(handle, queue, message, direct.size(), options.ackTimeoutMillis);
    sent(queue, groupRows, since);
  }

  private void sent(int queue, int groupRows, long since) {
    if (profile != null) {
      profile.add(Profile.Phase.PUBLISH, since);
    }
    result.lastSequences.put(queue, sequence);
    result.rows += groupRows;
    result.messages++;
  }
}
