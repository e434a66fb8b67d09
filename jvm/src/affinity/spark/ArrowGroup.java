package affinity.spark;

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
 * bit, value and offset of a row is written). Otherwise Spark's {@code ArrowWriter} fills them.
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
    return create(spec.schema, spec.timeZone, spec.largeVarTypes);
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

  /** Makes room for row {@link #count} in every vector. */
  private void grow() {
    for (FieldVector vector : vectors) {
      while (vector.getValueCapacity() <= count) {
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

  /** Appends one row. */
  void write(InternalRow row) {
    if (kinds == null) {
      spark.write(row);
      count++;
      return;
    }
    if (count >= capacity) {
      grow();
    }
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
      if (end + length > Integer.MAX_VALUE) {
        throw new AffinitySinkException("column " + SinkOptions.repr(root.getSchema().getFields().get(column).getName())
            + ": more than 2 GiB of values in one row group");
      }
      if (end + length > dataCapacity[column]) {
        BaseVariableWidthVector vector = (BaseVariableWidthVector) vectors[column];
        while (end + length > vector.getDataBuffer().capacity()) {
          vector.reallocDataBuffer();
        }
        addresses();
      }
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
}
