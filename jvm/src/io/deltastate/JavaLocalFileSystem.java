package io.deltastate;

import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * The local file system of Spark's sessions (checksummed, refusing to rename onto a file) over
 * {@link Raw}, which sets permissions and reads link status with Java's own file calls.
 *
 * Without Hadoop's native library, which no Maven artifact carries, the stock local file system runs
 * a shell command for both: `chmod` whenever a file is created with a permission (every Parquet
 * file, every Delta commit, every streaming checkpoint file) and `readlink` on every FileContext
 * rename (the same commits and checkpoint files, and each state store's changelog file): several
 * forks of a JVM of a few GiB per micro-batch, some on its tasks' threads (bench/results.md counts
 * them). Installed as fs.file.impl and, for FileContext,
 * fs.AbstractFileSystem.file.impl ({@link JavaLocalFs}).
 */
public class JavaLocalFileSystem extends LocalFileSystem {
    public JavaLocalFileSystem() {
        super(new Raw());
    }

    /**
     * false, and nothing moved, when dst is a file, as HDFS answers and as the file: system Spark
     * ships does (Hive's ProxyLocalFileSystem, registered for the scheme by hive-exec): put-if-absent
     * writers rely on it, such as Delta Kernel's checkpoint, which writes a temporary file and renames
     * it. Hadoop's LocalFileSystem would replace the file.
     */
    @Override
    public boolean rename(Path src, Path dst) throws IOException {
        try {
            if (getFileStatus(dst).isFile()) {
                return false;
            }
        } catch (FileNotFoundException absent) {
            // the usual case: nothing there yet
        }
        return super.rename(src, dst);
    }

    /** RawLocalFileSystem with permissions and link status through java.nio. */
    public static class Raw extends RawLocalFileSystem {
        private static final PosixFilePermission[] BITS = {  // from the mode's high bit to its low one
            PosixFilePermission.OWNER_READ, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_EXECUTE,
            PosixFilePermission.GROUP_READ, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE,
            PosixFilePermission.OTHERS_READ, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE};

        static Set<PosixFilePermission> posix(short mode) {
            Set<PosixFilePermission> out = EnumSet.noneOf(PosixFilePermission.class);
            for (int i = 0; i < BITS.length; i++) {
                if ((mode & (0400 >> i)) != 0) {
                    out.add(BITS[i]);
                }
            }
            return out;
        }

        /** The mode as chmod would set it (links followed); a sticky bit, which java.nio cannot set, goes to chmod. */
        @Override
        public void setPermission(Path p, FsPermission permission) throws IOException {
            short mode = permission.toShort();
            if ((mode & ~0777) != 0) {
                super.setPermission(p, permission);
                return;
            }
            File file = pathToFile(p);
            try {
                Files.setPosixFilePermissions(file.toPath(), posix(mode));
            } catch (NoSuchFileException e) {
                throw new FileNotFoundException("File " + p + " does not exist");
            } catch (UnsupportedOperationException e) {  // a file store without POSIX permissions
                super.setPermission(p, permission);
            }
        }

        /**
         * A link's status is Hadoop's own; anything else's is its file status, which is what Hadoop's
         * answers after its `readlink` finds no link.
         */
        @Override
        public FileStatus getFileLinkStatus(Path f) throws IOException {
            if (Files.isSymbolicLink(pathToFile(f).toPath())) {
                return super.getFileLinkStatus(f);
            }
            return getFileStatus(f);
        }
    }
}
