package affinity.spark;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermissions;

/**
 * The JNI bridge into the Rust core ({@code jvm/native}): one group publisher per (group,
 * registry) and JVM, on one client (the standalone driver of {@code $AFFINITY_DIR}, else an
 * embedded driver). The library is loaded from {@code $AFFINITY_JVM_NATIVE} when set, else
 * unpacked from this jar's {@link #RESOURCE} into a private temporary file.
 */
final class Native {
  /** Where the jar carries the native library. */
  static final String RESOURCE = "/affinity/spark/native/libaffinity_jvm.so";
  /** Environment variable naming a native library file to load instead of the jar's. */
  static final String LIBRARY_ENV = "AFFINITY_JVM_NATIVE";

  private static Throwable loadFailure;

  static {
    try {
      String path = System.getenv(LIBRARY_ENV);
      if (path == null || path.isEmpty()) {
        path = unpack().toString();
      }
      System.load(path);
      Runtime.getRuntime().addShutdownHook(new Thread(Native::shutdown, "affinity-native-shutdown"));
    } catch (Throwable error) {
      loadFailure = error;
    }
  }

  private Native() {}

  private static Path unpack() throws IOException {
    try (InputStream in = Native.class.getResourceAsStream(RESOURCE)) {
      if (in == null) {
        throw new IOException("the jar has no " + RESOURCE + " (build it with scripts/build-jvm.sh)");
      }
      Path dir = Files.createTempDirectory("affinity-jvm-",
          PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")));
      Path file = dir.resolve("libaffinity_jvm.so");
      Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
      file.toFile().deleteOnExit();
      dir.toFile().deleteOnExit();
      return file;
    }
  }

  /** Null when the library is loaded, else why not. */
  static Throwable loadFailure() {
    return loadFailure;
  }

  /** Throws when the library could not be loaded. */
  static void require() {
    if (loadFailure != null) {
      throw new AffinitySinkException("the affinity native library did not load: " + loadFailure);
    }
  }

  /** This JVM's publisher of {@code group} ({@code registry} may be null): a handle. */
  static native long openGroup(String group, String registry);

  /** The group's queue count (QC). */
  static native int queueCount(long handle);

  /** The queue of each of {@code count} keys; key i is {@code keys[ends[i-1]..ends[i]]}. */
  static native void queuesOf(long handle, byte[] keys, int[] ends, int count, int[] out);

  /** Publishes {@code message[0..length]} to {@code queue}, waiting on back-pressure up to the timeout. */
  static native long publish(long handle, int queue, byte[] message, int length, long timeoutMillis);

  /**
   * Whether every queue q acknowledged up to {@code sequences[q]} (group sequences {@link #publish}
   * returned; 0: none) within the timeout: one task's messages, not the other tasks' of the JVM.
   */
  static native boolean flushTo(long handle, long[] sequences, long timeoutMillis);

  /** Closes every publisher and the client. */
  static native void shutdown();
}
