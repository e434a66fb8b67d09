package affinity.spark;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.LinkOption;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Set;

/**
 * The JNI bridge into the Rust core ({@code jvm/native}): one group publisher per (group,
 * registry, placement) and JVM, on one client per driver (the standalone driver of the {@code
 * driverDir} option, else of {@code $AFFINITY_DIR}, else an embedded driver). The library is loaded from {@code $AFFINITY_JVM_NATIVE} when set, else
 * unpacked from this jar's {@link #RESOURCE} (see {@link #unpack}).
 */
final class Native {
  /** Where the jar carries the native library. */
  static final String RESOURCE = "/affinity/spark/native/libaffinity_jvm.so";
  /** Environment variable naming a native library file to load instead of the jar's. */
  static final String LIBRARY_ENV = "AFFINITY_JVM_NATIVE";

  /** Mode of the folder the library is unpacked into. */
  private static final Set<PosixFilePermission> PRIVATE = PosixFilePermissions.fromString("rwx------");

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

  /**
   * The jar's library as a file: {@code <java.io.tmpdir>/affinity-jvm-<user>/libaffinity_jvm-<sha256>.so},
   * written once (to a temporary name, then renamed) and shared by every JVM of the user that runs
   * the same build, so an executor killed with SIGKILL leaves nothing new behind. The folder must
   * be the user's own and private (0700), else loading fails naming it.
   */
  private static Path unpack() throws IOException {
    byte[] library;
    try (InputStream in = Native.class.getResourceAsStream(RESOURCE)) {
      if (in == null) {
        throw new IOException("the jar has no " + RESOURCE + " (build it with scripts/build-jvm.sh)");
      }
      library = in.readAllBytes();
    }
    String user = System.getProperty("user.name");
    Path dir = Paths.get(System.getProperty("java.io.tmpdir"), "affinity-jvm-" + user);
    try {
      Files.createDirectory(dir, PosixFilePermissions.asFileAttribute(PRIVATE));
    } catch (FileAlreadyExistsException exists) {
      // checked below
    }
    if (Files.isSymbolicLink(dir) || !Files.getOwner(dir, LinkOption.NOFOLLOW_LINKS).getName().equals(user)
        || !Files.getPosixFilePermissions(dir, LinkOption.NOFOLLOW_LINKS).equals(PRIVATE)) {
      throw new IOException(dir + " must be a directory of user " + user + " with mode 0700");
    }
    String digest = digest(library);
    Path file = dir.resolve("libaffinity_jvm-" + digest + ".so");
    if (Files.isRegularFile(file, LinkOption.NOFOLLOW_LINKS) && digest(Files.readAllBytes(file)).equals(digest)) {
      return file;
    }
    Path partial = Files.createTempFile(dir, "libaffinity_jvm-", ".partial");
    try {
      Files.write(partial, library);
      Files.move(partial, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    } finally {
      Files.deleteIfExists(partial);
    }
    return file;
  }

  private static String digest(byte[] bytes) throws IOException {
    try {
      StringBuilder hex = new StringBuilder();
      for (byte b : MessageDigest.getInstance("SHA-256").digest(bytes)) {
        hex.append(String.format("%02x", b));
      }
      return hex.toString();
    } catch (NoSuchAlgorithmException error) {
      throw new IOException(error);
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

  /**
   * This JVM's publisher of {@code group} placed by the sink's {@code driverDir}, {@code host},
   * {@code control} and {@code bootstrap} options ({@code registry} and each of those may be null):
   * a handle.
   */
  static native long openGroup(String group, String registry, String driverDir, String host, String control,
      String bootstrap);

  /** {@link #openGroup} with the group and placement of {@code options}. */
  static long openGroup(SinkOptions options) {
    return openGroup(options.group, options.registry, options.driverDir, options.host, options.control,
        options.bootstrap);
  }

  /** The group's queue count (QC). */
  static native int queueCount(long handle);

  /** The queue of each of {@code count} keys; key i is {@code keys[ends[i-1]..ends[i]]}. */
  static native void queuesOf(long handle, byte[] keys, int[] ends, int count, int[] out);

  /** Publishes {@code message[0..length]} to {@code queue}, waiting on back-pressure up to the timeout. */
  static native long publish(long handle, int queue, byte[] message, int length, long timeoutMillis);

  /**
   * Publishes {@code message[0..length]} (a direct buffer, read in place) to {@code queue}, waiting
   * on back-pressure up to the timeout.
   */
  static native long publishDirect(long handle, int queue, ByteBuffer message, int length, long timeoutMillis);

  /**
   * Whether every queue q acknowledged up to {@code sequences[q]} (group sequences {@link #publish}
   * returned; 0: none) within the timeout: one task's messages, not the other tasks' of the JVM.
   */
  static native boolean flushTo(long handle, long[] sequences, long timeoutMillis);

  /** Closes every publisher and the client. */
  static native void shutdown();
}
