#!/usr/bin/python3
# A FUSE file system for tests of disk faults: every call passes through to a backing directory,
# except those the faults named in a control file (one per line, read at each call) change:
#   stall        writes and fsyncs block until the line is gone or the file system is unmounted (a
#                stuck disk: the writer waits in the kernel, as on a dead NFS server);
#   stall-refill the same for writes and fsyncs into a step-next.partial-N directory (a spare
#                checkpoint file's fill) once a checkpoint was committed: the first fill goes through,
#                the refill after the commit meets a stuck disk;
#   fail-rename  a rename onto a name step-NNNNNNNN fails with EIO (a checkpoint's commit).
# Every write is recorded, as "PATH BYTES" lines in the file CONTROL.writes (the bytes a run wrote).
# Usage: faulty_fs.py MOUNTPOINT -f -o root=BACKING,control=FILE  (python3-fuse; the test unmounts it
# with fusermount -u -z and kills this process).
import errno
import os
import re
import time

import fuse

fuse.fuse_python_api = (0, 2)


class Faults:
    def __init__(self, control):
        self.control = control
        self.committed = False

    def active(self, name):
        try:
            with open(self.control) as f:
                return name in f.read().split()
        except FileNotFoundError:
            return False

    def stall(self, path):
        refill = self.committed and '.partial-' in path
        while self.active('stall') or (refill and self.active('stall-refill')):
            time.sleep(0.05)

    def wrote(self, path, length):
        with open(self.control + '.writes', 'a') as f:
            f.write(f'{path} {length}\n')


class FaultyFs(fuse.Fuse):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.root = None
        self.control = None

    def main(self, *a, **kw):
        faults = Faults(self.control)
        root = self.root

        class File:
            def __init__(self, path, flags, *mode):
                self.path = path
                self.fd = os.open(root + path, flags & ~os.O_DIRECT, *mode)

            def read(self, length, offset):
                return os.pread(self.fd, length, offset)

            def write(self, buf, offset):
                faults.stall(self.path)
                written = os.pwrite(self.fd, buf, offset)
                faults.wrote(self.path, written)
                return written

            def fgetattr(self):
                return os.fstat(self.fd)

            def ftruncate(self, length):
                os.ftruncate(self.fd, length)

            def fsync(self, isfsyncfile):
                faults.stall(self.path)
                os.fsync(self.fd)

            def flush(self):
                pass

            def release(self, flags):
                os.close(self.fd)

        self.file_class = File
        self.faults = faults
        return super().main(*a, **kw)

    def real(self, path):
        return self.root + path

    def getattr(self, path):
        return os.lstat(self.real(path))

    def readdir(self, path, offset):
        for name in ['.', '..'] + os.listdir(self.real(path)):
            yield fuse.Direntry(name)

    def mkdir(self, path, mode):
        os.mkdir(self.real(path), mode)

    def rmdir(self, path):
        os.rmdir(self.real(path))

    def unlink(self, path):
        os.unlink(self.real(path))

    def link(self, target, name):
        os.link(self.real(target), self.real(name))

    def rename(self, old, new):
        commit = re.fullmatch(r'step-\d{8}', os.path.basename(new)) is not None
        if self.faults.active('fail-rename') and commit:
            return -errno.EIO
        os.rename(self.real(old), self.real(new))
        self.faults.committed = self.faults.committed or commit

    def truncate(self, path, length):
        os.truncate(self.real(path), length)

    def chmod(self, path, mode):
        os.chmod(self.real(path), mode)

    def utimens(self, path, ts_acc, ts_mod):
        os.utime(self.real(path), ns=(ts_acc.tv_sec * 10**9 + ts_acc.tv_nsec, ts_mod.tv_sec * 10**9 + ts_mod.tv_nsec))

    def access(self, path, mode):
        if not os.access(self.real(path), mode):
            return -errno.EACCES

    def statfs(self):
        return os.statvfs(self.root)


def main():
    fs = FaultyFs(version='faulty_fs', usage='faulty_fs.py MOUNTPOINT -f -o root=BACKING,control=FILE')
    fs.parser.add_option(mountopt='root', metavar='BACKING')
    fs.parser.add_option(mountopt='control', metavar='FILE')
    fs.parse(values=fs, errex=1)
    fs.root = os.path.abspath(fs.root)
    fs.main()


if __name__ == '__main__':
    main()
