package affinity.spark;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;

/**
 * The 48-byte envelope header every sink message starts with ({@code affinity/spark/envelope.py},
 * docs/spark.md "What travels"): little-endian, version 1.
 */
final class Envelope {
  /** Bytes before the body. */
  static final int HEADER_LENGTH = 48;
  /** Layout version. */
  static final byte VERSION = 1;
  /** Kind: data. */
  static final byte DATA = 0;
  /** Kind: commit marker. */
  static final byte COMMIT = 1;
  /** Kind: abort marker. */
  static final byte ABORT = 2;
  /** Partition field of markers. */
  static final int MARKER_PARTITION = 0xFFFF_FFFF;
  private static final byte[] MAGIC = {'A', 'F', 'S', 'K'};

  private Envelope() {}

  /** The body format code of a {@code value} option: 0 arrow, 1 json, 2 binary. */
  static byte formatCode(String value) {
    switch (value) {
      case "arrow":
        return 0;
      case "json":
        return 1;
      case "binary":
        return 2;
      default:
        throw new IllegalArgumentException("value format " + value);
    }
  }

  /** Writes the header into {@code out[0..48]}. */
  static void write(byte[] out, byte kind, byte format, UUID query, long batchId, int partition, long rows,
      long sequence) {
    if (batchId < 0) {
      throw new IllegalArgumentException("batch id " + batchId + " is out of range [0, 2^63)");
    }
    if (rows < 0 || rows > 0xFFFF_FFFFL) {
      throw new IllegalArgumentException("row count " + rows + " is out of range [0, 2^32)");
    }
    ByteBuffer header = ByteBuffer.wrap(out, 0, HEADER_LENGTH).order(ByteOrder.LITTLE_ENDIAN);
    header.put(MAGIC).put(VERSION).put(kind).put(format).put((byte) 0);
    // A UUID's 16 bytes in their usual (big-endian) order, as Python's uuid.UUID.bytes.
    header.order(ByteOrder.BIG_ENDIAN).putLong(query.getMostSignificantBits())
        .putLong(query.getLeastSignificantBits()).order(ByteOrder.LITTLE_ENDIAN);
    header.putLong(batchId).putInt(partition).putInt((int) rows).putLong(sequence);
  }

  /** A whole marker message: header, then (commit) the (partition, last sequence) pairs of one queue. */
  static byte[] marker(byte kind, UUID query, long batchId, Map<Integer, Long> lastSequences) {
    Map<Integer, Long> sorted = new TreeMap<>((a, b) -> Integer.compareUnsigned(a, b));
    if (kind == COMMIT) {
      sorted.putAll(lastSequences);
    }
    int bodyLength = kind == COMMIT ? 4 + 12 * sorted.size() : 0;
    byte[] message = new byte[HEADER_LENGTH + bodyLength];
    write(message, kind, (byte) 0, query, batchId, MARKER_PARTITION, 0, 0);
    if (kind == COMMIT) {
      ByteBuffer body = ByteBuffer.wrap(message, HEADER_LENGTH, bodyLength).order(ByteOrder.LITTLE_ENDIAN);
      body.putInt(sorted.size());
      for (Map.Entry<Integer, Long> entry : sorted.entrySet()) {
        body.putInt(entry.getKey()).putLong(entry.getValue());
      }
    }
    return message;
  }
}
