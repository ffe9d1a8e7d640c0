package io.deltastate;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.local.LocalConfigKeys;

/**
 * FileContext's local file system (fs.AbstractFileSystem.file.impl) over
 * {@link JavaLocalFileSystem.Raw}: Hadoop's LocalFs, checksummed the same way, without the shell
 * commands its renames and permissions run (JavaLocalFileSystem says why). Spark's streaming
 * checkpoints and Delta's log writes go through FileContext.
 */
public class JavaLocalFs extends ChecksumFs {
    public JavaLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
        super(new Raw(conf));  // as Hadoop's LocalFs, whatever local URI it is asked for
    }

    /** Hadoop's RawLocalFs, delegating to JavaLocalFileSystem.Raw. */
    static final class Raw extends DelegateToFileSystem {
        Raw(Configuration conf) throws IOException, URISyntaxException {
            super(FsConstants.LOCAL_FS_URI, new JavaLocalFileSystem.Raw(), conf, FsConstants.LOCAL_FS_URI.getScheme(),
                  false);
        }

        @Override
        public int getUriDefaultPort() {
            return -1;  // file:/// has no port
        }

        @Override
        @Deprecated
        public FsServerDefaults getServerDefaults() throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        public FsServerDefaults getServerDefaults(Path f) throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        public boolean isValidName(String src) {
            return true;  // the operating system validates local names, as in Hadoop's RawLocalFs
        }
    }
}
