package io.deltastate;

import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;

import io.delta.storage.HDFSLogStore;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFileSystem;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

/**
 * Delta's log store for local tables (the one Delta uses for file: paths, HDFSLogStore), listing a
 * log folder by name before asking for any file's status.
 *
 * Delta lists a table's _delta_log from a version on whenever it brings its snapshot up to date, on
 * every commit. Hadoop's local file system answers a folder listing with the status of every file in
 * it, one stat call each, so a listing costs every file the log keeps, though Delta only wants the
 * few from that version on. This store reads the folder's names (one directory read), keeps those at
 * or after the asked name, and asks the status of those alone. Writes, reads and every other storage
 * are HDFSLogStore's own.
 */
public class LocalLogStore extends HDFSLogStore {
    public LocalLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public Iterator<FileStatus> listFrom(Path path, Configuration hadoopConf) throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        File folder;
        if (fs instanceof LocalFileSystem local) {
            folder = local.pathToFile(path.getParent());
        } else if (fs instanceof RawLocalFileSystem raw) {
            folder = raw.pathToFile(path.getParent());
        } else {
            return super.listFrom(path, hadoopConf);
        }
        String[] names = folder.list();
        if (names == null) {
            throw new FileNotFoundException("No such file or directory: " + path.getParent());
        }
        String from = path.getName();
        Path parent = fs.makeQualified(path.getParent());
        List<FileStatus> found = new ArrayList<>();
        for (String name : names) {
            if (name.compareTo(from) < 0 || ChecksumFileSystem.isChecksumFile(new Path(name))) {
                continue;
            }
            try {
                found.add(fs.getFileStatus(new Path(parent, name)));
            } catch (FileNotFoundException gone) {
                // deleted between the directory read and its status (a log cleanup): not listed
            }
        }
        found.sort(Comparator.comparing(status -> status.getPath().getName()));
        return found.iterator();
    }
}
