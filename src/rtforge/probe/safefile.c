/* Every file the probe creates or writes goes through here (a test fails
 * on any other open for writing), because it runs as root in folders that
 * other users may reach: a textfile folder node_exporter's group can write,
 * a --state-dir someone named.  So a file is created with O_EXCL and
 * O_NOFOLLOW -- a link or a FIFO planted under its name makes the create
 * fail, never a write elsewhere or a wait for a reader -- and replaced by
 * a rename from a temporary file of a name nobody can guess (mkstemp).
 * The soak monitor's own folder must be the probe's alone (owned_dir). */
#include "rtprobe.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int file_create(const char *path, mode_t mode)
{
    /* what stands there (an old file, or a link someone put) goes, then a
     * new file or nothing: if the name comes back meanwhile, O_EXCL fails */
    if (unlink(path) && errno != ENOENT)
        return -1;
    return open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
}

FILE *file_fcreate(const char *path)
{
    int fd = file_create(path, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (fd >= 0 && !f)
        close(fd);
    return f;
}

int file_open(const char *path, int flags)
{
    /* O_NONBLOCK: a FIFO under the name fails at once instead of waiting */
    int fd = open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    struct stat st;
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

int write_atomic(const char *dir, const char *name, const char *data, size_t len)
{
    char tmp[4096], dst[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s/.%s.XXXXXX", dir, name) >= sizeof tmp ||
        (size_t)snprintf(dst, sizeof dst, "%s/%s", dir, name) >= sizeof dst)
        return -1;
    int fd = mkstemp(tmp); /* O_EXCL, mode 0600 */
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(fd, data + off, len - off);
        if (n <= 0) {
            close(fd);
            unlink(tmp);
            return -1;
        }
        off += (size_t)n;
    }
    /* readable by node_exporter's user; fsync: a board that loses power
     * mid-run must still hold a whole checkpoint (the remote fetch of a
     * partial run depends on it). */
    if (fchmod(fd, 0644) || fsync(fd) || close(fd) || rename(tmp, dst)) {
        unlink(tmp);
        return -1;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

/* The rule of rtforge's shell helper rtforge_owned (data/safe.sh), here:
 * dir is a folder, not a link, of this user, writable by no one else,
 * below folders of root or this user writable by no one else unless
 * sticky.  0, or -1 with why. */
int owned_dir(const char *dir, char *why, size_t size)
{
    struct stat st;
    char real[PATH_MAX];
    if (lstat(dir, &st)) {
        snprintf(why, size, "%.500s: %s", dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, size, "%.500s is a symbolic link or not a folder", dir);
        return -1;
    }
    if (st.st_uid != geteuid() || (st.st_mode & 022)) {
        snprintf(why, size, "%.500s %s, so another user could put files where the probe writes as root: "
                 "use a folder of this user that only it can write (chown, chmod go-w)", dir,
                 st.st_uid != geteuid() ? "belongs to another user" : "can be written by other users");
        return -1;
    }
    if (!realpath(dir, real)) {
        snprintf(why, size, "%.500s: %s", dir, strerror(errno));
        return -1;
    }
    for (char *slash = strrchr(real, '/'); slash; slash = strrchr(real, '/')) {
        *slash = 0;
        const char *up = *real ? real : "/";
        if (stat(up, &st)) {
            snprintf(why, size, "%.500s: %s", up, strerror(errno));
            return -1;
        }
        if ((st.st_uid != 0 && st.st_uid != geteuid()) || ((st.st_mode & 022) && !(st.st_mode & S_ISVTX))) {
            snprintf(why, size, "%.500s, above %.500s, %s: another user could replace the folder", up, dir,
                     (st.st_uid != 0 && st.st_uid != geteuid()) ? "belongs to another user"
                     : "can be written by other users and is not sticky");
            return -1;
        }
        if (!*real)
            break;
    }
    return 0;
}
