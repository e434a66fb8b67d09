package affinity.spark;

import com.google.flatbuffers.FlatBufferBuilder;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import org.apache.arrow.flatbuf.FieldNode;
import org.apache.arrow.flatbuf.Message;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.flatbuf.RecordBatch;
import org.apache.arrow.memory.util.MemoryUtil;
import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.BaseVariableWidthVector;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.DateDayVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.Float8Vector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.SmallIntVector;
import org.apache.arrow.vector.TimeStampMicroTZVector;
import org.apache.arrow.vector.TimeStampMicroVector;
import org.apache.arrow.vector.TinyIntVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.WriteChannel;
import org.apache.arrow.vector.ipc.message.IpcOption;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.arrow.ArrowWriter;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One row group's Arrow vectors, filled from rows. The vectors are the ones Spark's
 * {@link ArrowWriter} creates for the schema (same Arrow schema, same allocator), so the IPC body
 * is what Spark's writer would give. When every column is a flat type of {@link #kindOf} (numbers,
 * dates, timestamps, strings, binary; not {@code largeVarTypes}) the values are written straight
 * into the vectors' memory: one capacity check per row (vectors doubled as needed), no virtual
 * call or bounds check per value, and no zeroing of the vectors between messages (every validity
 * bit, value and offset of a row is written), row by row ({@link #write}) or a run of rows column
 * by column ({@link #writeRows}), and such a group's Arrow IPC stream is encoded straight from
 * the vectors' memory ({@link #encode}). Otherwise Spark's {@code ArrowWriter} fills them.
 */
final class ArrowGroup {
  /** Column kinds of the direct path: how a value is read from the row and written. */
  private static final int LONG = 0;
  private static final int INT = 1;
  private static final int SHORT = 2;
  private static final int BYTE = 3;
  private static final int DOUBLE = 4;
  private static final int FLOAT = 5;
  private static final int STRING = 6;
  private static final int BINARY = 7;
  /** A type the direct path does not write. */
  private static final int OTHER = -1;
  /** Longest string or binary value copied word by word rather than by one bulk copy. */
  static final int SHORT_COPY = 64;

  private final ArrowWriter spark;
  private final VectorSchemaRoot root;
  /** Per column, its kind; null: Spark's writer fills the vectors. */
  private final int[] kinds;
  private final FieldVector[] vectors;
  /** Per column, bytes of a value (fixed width) or 0 (variable width). */
  private final int[] widths;
  /** Per variable-width column, the end of its data so far. */
  private final long[] dataEnds;
  /**
   * Per column, the addresses of its validity, data and (variable width) offset buffers and the
   * data buffer's capacity, read again whenever a buffer is reallocated (no call per value).
   */
  private final long[] validityAt;
  private final long[] dataAt;
  private final long[] offsetsAt;
  private final long[] dataCapacity;
  /** Bytes before an IPC message's metadata: the continuation marker and the metadata length. */
  private static final int IPC_PREFIX = 8;
  /** The IPC continuation marker (what Arrow writes before each message's metadata length). */
  private static final int IPC_CONTINUATION = 0xFFFFFFFF;
  /** The IPC schema message of {@link #root}'s schema (stream start), serialized at the first {@link #encode}. */
  private byte[] schemaMessage;
  /** The record batch metadata's builder, reused message after message. */
  private final FlatBufferBuilder flatBuffers = new FlatBufferBuilder(1024);
  /** Per column, its null count; per body buffer, its address, offset in the body and size ({@link #encode}). */
  private final long[] nullCounts;
  private final long[] bufferAddresses;
  private final long[] bufferOffsets;
  private final long[] bufferSizes;
  /** Rows every vector holds without growing. */
  private int capacity;
  private int count;

  private ArrowGroup(ArrowWriter spark, int[] kinds) {
    this.spark = spark;
    this.root = spark.root();
    this.kinds = kinds;
    int columns = root.getFieldVectors().size();
    this.vectors = root.getFieldVectors().toArray(new FieldVector[columns]);
    this.widths = new int[columns];
    this.dataEnds = new long[columns];
    this.validityAt = new long[columns];
    this.dataAt = new long[columns];
    this.offsetsAt = new long[columns];
    this.dataCapacity = new long[columns];
    this.nullCounts = new long[columns];
    this.bufferAddresses = new long[3 * columns];
    this.bufferOffsets = new long[3 * columns];
    this.bufferSizes = new long[3 * columns];
    if (kinds != null) {
      for (int i = 0; i < columns; i++) {
        widths[i] = vectors[i] instanceof BaseFixedWidthVector ? ((BaseFixedWidthVector) vectors[i]).getTypeWidth() : 0;
      }
      capacity = minCapacity();
      addresses();
    }
  }

  /** Reads every column's buffer addresses (after an allocation). */
  private void addresses() {
    for (int i = 0; i < vectors.length; i++) {
      FieldVector vector = vectors[i];
      validityAt[i] = vector.getValidityBufferAddress();
      dataAt[i] = vector.getDataBufferAddress();
      if (vector instanceof BaseVariableWidthVector) {
        offsetsAt[i] = vector.getOffsetBufferAddress();
        dataCapacity[i] = ((BaseVariableWidthVector) vector).getDataBuffer().capacity();
      }
    }
  }

  /** A row group for rows of {@code spec}'s schema. */
  static ArrowGroup create(WriteSpec spec) {
    ArrowWriter spark = ArrowWriter.create(spec.schema, spec.timeZone, false, spec.largeVarTypes);
    return new ArrowGroup(spark, spec.fill == WriteSpec.FILL_SPARK ? null : directKinds(spec.schema, spark.root()));
  }

  /** A row group for rows of {@code schema} (Spark's Arrow settings: session time zone, large var types). */
  static ArrowGroup create(StructType schema, String timeZone, boolean largeVarTypes) {
    ArrowWriter spark = ArrowWriter.create(schema, timeZone, false, largeVarTypes);
    return new ArrowGroup(spark, directKinds(schema, spark.root()));
  }

  /** Whether rows of this group are written by the direct path (else by Spark's {@code ArrowWriter}). */
  boolean direct() {
    return kinds != null;
  }

  /** The kind of each column when all of them have one and their vectors are the expected ones, else null. */
  static int[] directKinds(StructType schema, VectorSchemaRoot root) {
    int[] kinds = new int[schema.fields().length];
    for (int i = 0; i < kinds.length; i++) {
      kinds[i] = kindOf(schema.fields()[i].dataType(), root.getVector(i));
      if (kinds[i] == OTHER) {
        return null;
      }
    }
    return kinds;
  }

  /** The direct path's kind of a column of Spark type {@code type} held in {@code vector}, or {@link #OTHER}. */
  static int kindOf(DataType type, FieldVector vector) {
    if (type instanceof LongType && vector instanceof BigIntVector) {
      return LONG;
    }
    if ((type instanceof TimestampType && vector instanceof TimeStampMicroTZVector)
        || (type instanceof TimestampNTZType && vector instanceof TimeStampMicroVector)) {
      return LONG; // microseconds since the epoch, as Spark's TimestampWriter writes them
    }
    if ((type instanceof IntegerType && vector instanceof IntVector)
        || (type instanceof DateType && vector instanceof DateDayVector)) {
      return INT;
    }
    if (type instanceof ShortType && vector instanceof SmallIntVector) {
      return SHORT;
    }
    if (type instanceof ByteType && vector instanceof TinyIntVector) {
      return BYTE;
    }
    if (type instanceof DoubleType && vector instanceof Float8Vector) {
      return DOUBLE;
    }
    if (type instanceof FloatType && vector instanceof Float4Vector) {
      return FLOAT;
    }
    if (type instanceof StringType && vector instanceof VarCharVector) {
      return STRING;
    }
    if (type instanceof BinaryType && vector instanceof VarBinaryVector) {
      return BINARY;
    }
    return OTHER;
  }

  private int minCapacity() {
    int min = Integer.MAX_VALUE;
    for (FieldVector vector : vectors) {
      min = Math.min(min, vector.getValueCapacity());
    }
    return min;
  }

  /** Makes room for {@code rows} more rows in every vector. */
  private void reserve(int rows) {
    if ((long) count + rows > capacity) {
      for (FieldVector vector : vectors) {
        while (vector.getValueCapacity() < count + rows) {
          if (vector instanceof BaseVariableWidthVector) {
            ((BaseVariableWidthVector) vector).reallocValidityAndOffsetBuffers();
          } else {
            vector.reAlloc();
          }
        }
      }
      capacity = minCapacity();
      addresses();
    }
  }

  /**
   * How many of the rows {@code order[from..to)} of {@code rows} go into this group before it is
   * full, counting the row that fills it: the group is full once it holds {@code maxRows} rows,
   * or, checked every {@link AffinityDataWriter#SIZE_CHECK_ROWS} rows, {@link #sizeInBytes} is at
   * least {@code budget} (the cut {@link #write} row by row with the same checks gives). Direct
   * path, {@link UnsafeRow}s only: variable-width sizes are read from the rows, nothing is written.
   */
  int rowsUntilFull(InternalRow[] rows, int[] order, int from, int to, int maxRows, long budget) {
    long validityAndFixed = 0;
    long variable = 0;
    for (int i = 0; i < kinds.length; i++) {
      variable += dataEnds[i];
    }
    int n = 0;
    for (int k = from; k < to; k++) {
      UnsafeRow row = (UnsafeRow) rows[order[k]];
      for (int i = 0; i < kinds.length; i++) {
        if (kinds[i] >= STRING && !row.isNullAt(i)) {
          variable += (int) row.getLong(i);
        }
      }
      n++;
      int rowsNow = count + n;
      if (rowsNow >= maxRows) {
        return n;
      }
      if (rowsNow % AffinityDataWriter.SIZE_CHECK_ROWS == 0) {
        validityAndFixed = 0;
        long validity = (rowsNow + 7) / 8;
        for (int i = 0; i < kinds.length; i++) {
          validityAndFixed += validity + (widths[i] > 0 ? (long) rowsNow * widths[i] : (long) (rowsNow + 1) * 4);
        }
        if (validityAndFixed + variable >= budget) {
          return n;
        }
      }
    }
    return n;
  }

  /**
   * Appends the rows {@code order[from..to)} of {@code rows}, all {@link UnsafeRow}s of this
   * group's schema, column by column (direct path only): each column's values, validity bits and
   * offsets are written in one loop over the rows, read from the rows' bytes in place (no call
   * per value, one validity byte store per 8 rows, one capacity check per column).
   */
  void writeRows(InternalRow[] rows, int[] order, int from, int to) {
    int n = to - from;
    if (n <= 0) {
      return;
    }
    reserve(n);
    int fields = kinds.length;
    long bitSetBytes = UnsafeRow.calculateBitSetWidthInBytes(fields);
    for (int i = 0; i < fields; i++) {
      long nullWord = (long) (i >>> 6) * 8;
      long nullMask = 1L << (i & 63);
      long slot = bitSetBytes + (long) i * 8;
      int kind = kinds[i];
      // Validity: bits of the rows before this run kept in the first byte, then one store per byte.
      long validity = validityAt[i];
      int index = count;
      long validityByte = validity + (index >>> 3);
      int bits = Platform.getByte(null, validityByte) & ((1 << (index & 7)) - 1);
      if (kind >= STRING) {
        long end = dataEnds[i];
        long more = 0;
        for (int k = from; k < to; k++) {
          UnsafeRow row = (UnsafeRow) rows[order[k]];
          Object base = row.getBaseObject();
          long at = row.getBaseOffset();
          if ((Platform.getLong(base, at + nullWord) & nullMask) == 0) {
            more += (int) Platform.getLong(base, at + slot);
          }
        }
        ensureData(i, end + more);
        long data = dataAt[i];
        long offsets = offsetsAt[i] + 4;
        for (int k = from; k < to; k++) {
          UnsafeRow row = (UnsafeRow) rows[order[k]];
          Object base = row.getBaseObject();
          long at = row.getBaseOffset();
          if ((Platform.getLong(base, at + nullWord) & nullMask) == 0) {
            bits |= 1 << (index & 7);
            long offsetAndSize = Platform.getLong(base, at + slot);
            int length = (int) offsetAndSize;
            copy(base, at + (offsetAndSize >>> 32), null, data + end, length);
            end += length;
          }
          Platform.putInt(null, offsets + (long) index * 4, (int) end);
          index++;
          if ((index & 7) == 0) {
            Platform.putByte(null, validityByte++, (byte) bits);
            bits = 0;
          }
        }
        dataEnds[i] = end;
      } else {
        long data = dataAt[i];
        int width = widths[i];
        for (int k = from; k < to; k++) {
          UnsafeRow row = (UnsafeRow) rows[order[k]];
          Object base = row.getBaseObject();
          long at = row.getBaseOffset();
          boolean valid = (Platform.getLong(base, at + nullWord) & nullMask) == 0;
          long target = data + (long) index * width;
          // The value's bytes as the row holds them (little-endian, low bytes of its 8-byte slot;
          // a double's or float's bits as they are), zero for a null as Arrow's writers leave it.
          if (width == 8) {
            Platform.putLong(null, target, valid ? Platform.getLong(base, at + slot) : 0L);
          } else if (width == 4) {
            Platform.putInt(null, target, valid ? Platform.getInt(base, at + slot) : 0);
          } else if (width == 2) {
            Platform.putShort(null, target, valid ? Platform.getShort(base, at + slot) : 0);
          } else {
            Platform.putByte(null, target, valid ? Platform.getByte(base, at + slot) : 0);
          }
          if (valid) {
            bits |= 1 << (index & 7);
          }
          index++;
          if ((index & 7) == 0) {
            Platform.putByte(null, validityByte++, (byte) bits);
            bits = 0;
          }
        }
      }
      if ((index & 7) != 0) {
        Platform.putByte(null, validityByte, (byte) bits);
      }
    }
    count += n;
  }

  /** Appends one row. */
  void write(InternalRow row) {
    if (kinds == null) {
      spark.write(row);
      count++;
      return;
    }
    reserve(1);
    int index = count;
    for (int i = 0; i < kinds.length; i++) {
      boolean isNull = row.isNullAt(i);
      setValidity(validityAt[i], index, !isNull);
      int kind = kinds[i];
      if (kind >= STRING) {
        writeBytes(i, index, isNull ? null : row, kind);
        continue;
      }
      long at = dataAt[i] + (long) index * widths[i];
      switch (kind) {
        case LONG:
          Platform.putLong(null, at, isNull ? 0L : row.getLong(i));
          break;
        case INT:
          Platform.putInt(null, at, isNull ? 0 : row.getInt(i));
          break;
        case SHORT:
          Platform.putShort(null, at, isNull ? 0 : row.getShort(i));
          break;
        case BYTE:
          Platform.putByte(null, at, isNull ? 0 : row.getByte(i));
          break;
        case DOUBLE:
          Platform.putDouble(null, at, isNull ? 0.0 : row.getDouble(i));
          break;
        default:
          Platform.putFloat(null, at, isNull ? 0.0f : row.getFloat(i));
          break;
      }
    }
    count++;
  }

  private static void setValidity(long validity, int index, boolean valid) {
    long at = validity + (index >>> 3);
    byte bits = Platform.getByte(null, at);
    int mask = 1 << (index & 7);
    Platform.putByte(null, at, (byte) (valid ? bits | mask : bits & ~mask));
  }

  /**
   * Row {@code index} of a string or binary column: its bytes (none when {@code row} is null) and
   * its end offset. From an {@link UnsafeRow} (what Spark's generated code hands over) the bytes
   * are read where the row holds them, without a {@link UTF8String} or {@code byte[]} per value.
   */
  private void writeBytes(int column, int index, InternalRow row, int kind) {
    long end = dataEnds[column];
    if (row != null) {
      Object base;
      long offset;
      int length;
      if (row instanceof UnsafeRow) {
        UnsafeRow unsafe = (UnsafeRow) row;
        long offsetAndSize = unsafe.getLong(column);
        base = unsafe.getBaseObject();
        offset = unsafe.getBaseOffset() + (offsetAndSize >>> 32);
        length = (int) offsetAndSize;
      } else if (kind == STRING) {
        UTF8String value = row.getUTF8String(column);
        base = value.getBaseObject();
        offset = value.getBaseOffset();
        length = value.numBytes();
      } else {
        byte[] value = row.getBinary(column);
        base = value;
        offset = Platform.BYTE_ARRAY_OFFSET;
        length = value.length;
      }
      ensureData(column, end + length);
      copy(base, offset, null, dataAt[column] + end, length);
      end += length;
      dataEnds[column] = end;
    }
    Platform.putInt(null, offsetsAt[column] + (long) (index + 1) * 4, (int) end);
  }

  /**
   * Copies {@code length} bytes from {@code base + offset} to {@code to + toOffset} (a null base:
   * an address): values up to {@link #SHORT_COPY} bytes (keys, names) word by word, longer ones
   * with one bulk copy, whose fixed cost dominates a short value's copy.
   */
  static void copy(Object base, long offset, Object to, long toOffset, int length) {
    if (length > SHORT_COPY) {
      Platform.copyMemory(base, offset, to, toOffset, length);
      return;
    }
    int i = 0;
    for (; i + 8 <= length; i += 8) {
      Platform.putLong(to, toOffset + i, Platform.getLong(base, offset + i));
    }
    for (; i < length; i++) {
      Platform.putByte(to, toOffset + i, Platform.getByte(base, offset + i));
    }
  }

  /** Arrow bytes of the rows so far (about what the IPC body's buffers take). */
  long sizeInBytes() {
    if (kinds == null) {
      return spark.sizeInBytes();
    }
    long bytes = 0;
    long validity = (count + 7) / 8;
    for (int i = 0; i < kinds.length; i++) {
      bytes += validity + (widths[i] > 0 ? (long) count * widths[i] : (long) (count + 1) * 4 + dataEnds[i]);
    }
    return bytes;
  }

  /** Sets the row count and the vectors' value counts: {@link #root} then holds the rows written. */
  void finish() {
    if (kinds == null) {
      spark.finish();
      return;
    }
    for (int i = 0; i < vectors.length; i++) {
      FieldVector vector = vectors[i];
      if (count % 8 != 0) { // the last validity byte's bits past the rows: zero, as Arrow writes them
        long at = vector.getValidityBufferAddress() + count / 8;
        Platform.putByte(null, at, (byte) (Platform.getByte(null, at) & ((1 << (count % 8)) - 1)));
      }
      if (vector instanceof BaseVariableWidthVector) {
        BaseVariableWidthVector variable = (BaseVariableWidthVector) vector;
        Platform.putInt(null, variable.getOffsetBufferAddress(), 0);
        variable.setLastSet(count - 1);
      }
      vector.setValueCount(count);
    }
    root.setRowCount(count);
  }

  /**
   * Writes the Arrow IPC stream of the rows written (after {@link #finish}; direct path) after
   * {@code out}'s position: the schema message (serialized once per group), one record batch
   * message and the end-of-stream marker, byte for byte what Arrow's {@code ArrowStreamWriter}
   * writes for {@link #root} (metadata version 5, buffers 8-byte aligned, no compression), with
   * each buffer copied once from the vectors' memory into {@code out} and no object per buffer.
   */
  void encode(AffinityDataWriter.DirectOut out) throws IOException {
    if (schemaMessage == null) {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream();
      MessageSerializer.serialize(new WriteChannel(Channels.newChannel(bytes)), root.getSchema());
      schemaMessage = bytes.toByteArray();
    }
    // The buffers, in VectorUnloader's order: validity, (offsets), data per column; each at an
    // 8-byte aligned offset of the body.
    int buffers = 0;
    long offset = 0;
    for (int i = 0; i < vectors.length; i++) {
      FieldVector vector = vectors[i];
      nullCounts[i] = vector.getNullCount();
      offset = layout(buffers++, vector.getValidityBufferAddress(), (count + 7) / 8, offset);
      if (widths[i] > 0) {
        offset = layout(buffers++, vector.getDataBufferAddress(), (long) count * widths[i], offset);
      } else {
        offset = layout(buffers++, vector.getOffsetBufferAddress(), (long) (count + 1) * 4, offset);
        offset = layout(buffers++, vector.getDataBufferAddress(), dataEnds[i], offset);
      }
    }
    long bodyLength = offset;
    FlatBufferBuilder builder = flatBuffers;
    builder.clear();
    RecordBatch.startNodesVector(builder, vectors.length);
    for (int i = vectors.length - 1; i >= 0; i--) {
      FieldNode.createFieldNode(builder, count, nullCounts[i]);
    }
    int nodes = builder.endVector();
    RecordBatch.startBuffersVector(builder, buffers);
    for (int b = buffers - 1; b >= 0; b--) {
      org.apache.arrow.flatbuf.Buffer.createBuffer(builder, bufferOffsets[b], bufferSizes[b]);
    }
    int layout = builder.endVector();
    RecordBatch.startRecordBatch(builder);
    RecordBatch.addLength(builder, count);
    RecordBatch.addNodes(builder, nodes);
    RecordBatch.addBuffers(builder, layout);
    int batch = RecordBatch.endRecordBatch(builder);
    Message.startMessage(builder);
    Message.addHeaderType(builder, MessageHeader.RecordBatch);
    Message.addHeader(builder, batch);
    Message.addVersion(builder, IpcOption.DEFAULT.metadataVersion.toFlatbufID());
    Message.addBodyLength(builder, bodyLength);
    builder.finish(Message.endMessage(builder));
    ByteBuffer metadata = builder.dataBuffer();
    // The metadata padded so the body starts 8-byte aligned (the schema message's length is a multiple of 8).
    int metadataLength = metadata.remaining();
    int metadataPadded = (metadataLength + IPC_PREFIX + 7) / 8 * 8 - IPC_PREFIX;
    ByteBuffer to = out.reserve(schemaMessage.length + IPC_PREFIX + metadataPadded + bodyLength + IPC_PREFIX);
    to.put(schemaMessage);
    to.putInt(IPC_CONTINUATION);
    to.putInt(metadataPadded);
    to.put(metadata);
    zeros(to, metadataPadded - metadataLength);
    long body = MemoryUtil.getByteBufferAddress(to) + to.position();
    long written = 0;
    for (int b = 0; b < buffers; b++) {
      Platform.setMemory(body + written, (byte) 0, bufferOffsets[b] - written);
      Platform.copyMemory(null, bufferAddresses[b], null, body + bufferOffsets[b], bufferSizes[b]);
      written = bufferOffsets[b] + bufferSizes[b];
    }
    Platform.setMemory(body + written, (byte) 0, bodyLength - written);
    to.position(to.position() + (int) bodyLength);
    to.putInt(IPC_CONTINUATION);
    to.putInt(0); // end of stream
  }

  /** Records buffer {@code index} of the body (at {@code offset}, {@code size} bytes); the next buffer's offset. */
  private long layout(int index, long address, long size, long offset) {
    bufferAddresses[index] = address;
    bufferOffsets[index] = offset;
    bufferSizes[index] = size;
    return (offset + size + 7) / 8 * 8;
  }

  private static void zeros(ByteBuffer to, int length) {
    for (int i = 0; i < length; i++) {
      to.put((byte) 0);
    }
  }

  /** The vectors (after {@link #finish}: the rows written). */
  VectorSchemaRoot root() {
    return root;
  }

  /** Empties the group, keeping its memory (the direct path overwrites every byte it sends). */
  void reset() {
    if (kinds == null) {
      spark.reset();
    } else {
      for (int i = 0; i < vectors.length; i++) {
        vectors[i].setValueCount(0);
        dataEnds[i] = 0;
      }
      root.setRowCount(0);
    }
    count = 0;
  }

  /** Frees the vectors. */
  void close() {
    root.close();
  }

  /**
   * Makes variable-width column {@code column}'s data buffer hold {@code needed} bytes (growing
   * it and reading the buffers' addresses again); more than 2 GiB in one row group is an error.
   */
  private void ensureData(int column, long needed) {
    if (needed > Integer.MAX_VALUE) {
      throw new AffinitySinkException("column " + SinkOptions.repr(root.getSchema().getFields().get(column).getName())
          + ": more than 2 GiB of values in one row group");
    }
    if (needed > dataCapacity[column]) {
      BaseVariableWidthVector vector = (BaseVariableWidthVector) vectors[column];
      while (needed > vector.getDataBuffer().capacity()) {
        vector.reallocDataBuffer();
      }
      addresses();
    }
  }
}
