/* A fault injector for crash-point tests (tests/crash_points.py), loaded with LD_PRELOAD.

   Every call that changes a file under one of the roots in DOTS_FAULT_ROOTS (colon-separated
   absolute paths) is a crash point: a write, truncate, create, mkdir, rename, link, delete or
   fsync, numbered in the order the process makes them (all threads). With DOTS_FAULT_LOG set,
   each is appended there as "N KIND PATH". With DOTS_FAULT_AT=N the process sends itself
   DOTS_FAULT_SIGNAL (default 9, SIGKILL) just before crash point N: SIGKILL never returns, a
   handled signal (SIGTERM) lets the call proceed, as a signal arriving at that instant would.
   With DOTS_FAULT_SNAPSHOT=DIR, DOTS_FAULT_COPY (default: the first root) is copied to DIR/N just
   before each point N (other threads' points wait meanwhile): the files a SIGKILL there would have
   left, every point in one run.
   dots_fault_configure() rereads the environment (a forked child arms itself with it). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/wait.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static char roots[8192];
static int log_fd = -1;
static long fault_at = 0;
static int fault_signal = SIGKILL;
static long counter = 0;
static char snapshots[PATH_MAX];
static char copied[PATH_MAX];
static pthread_mutex_t one_at_a_time = PTHREAD_MUTEX_INITIALIZER;

void dots_fault_configure(void) {
    const char *r = getenv("DOTS_FAULT_ROOTS");
    snprintf(roots, sizeof roots, "%s", r ? r : "");
    const char *at = getenv("DOTS_FAULT_AT");
    fault_at = at ? atol(at) : 0;
    const char *sig = getenv("DOTS_FAULT_SIGNAL");
    fault_signal = sig ? atoi(sig) : SIGKILL;
    __atomic_store_n(&counter, 0, __ATOMIC_SEQ_CST);
    if (log_fd >= 0) syscall(SYS_close, log_fd);
    log_fd = -1;
    const char *snap = getenv("DOTS_FAULT_SNAPSHOT");
    snprintf(snapshots, sizeof snapshots, "%s", snap ? snap : "");
    const char *copy = getenv("DOTS_FAULT_COPY");
    snprintf(copied, sizeof copied, "%s", copy && *copy ? copy : roots);
    char *colon = strchr(copied, ':');
    if (colon) *colon = 0;
    const char *log = getenv("DOTS_FAULT_LOG");
    if (log && *log) log_fd = (int)syscall(SYS_openat, AT_FDCWD, log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

__attribute__((constructor)) static void init(void) { dots_fault_configure(); }

static int under_roots(const char *path) {
    if (!roots[0] || !path) return 0;
    const char *p = roots;
    while (*p) {
        const char *end = strchr(p, ':');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n && strncmp(path, p, n) == 0 && (path[n] == '/' || path[n] == 0)) return 1;
        if (!end) break;
        p = end + 1;
    }
    return 0;
}

/* the absolute form of `path` seen from directory fd `dirfd` (AT_FDCWD: the working directory) */
static int absolute(int dirfd, const char *path, char *out, size_t size) {
    if (!path) return 0;
    if (path[0] == '/') {
        snprintf(out, size, "%s", path);
        return 1;
    }
    char dir[PATH_MAX];
    if (dirfd == AT_FDCWD) {
        if (!getcwd(dir, sizeof dir)) return 0;
    } else {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
        ssize_t n = readlink(link, dir, sizeof dir - 1);
        if (n < 0) return 0;
        dir[n] = 0;
    }
    snprintf(out, size, "%s/%s", dir, path);
    return 1;
}

/* copy the copied folder to `snapshots`/n with cp -a (no injector in it) */
static void snapshot(long n) {
    char target[PATH_MAX + 32];
    snprintf(target, sizeof target, "%s/%ld", snapshots, n);
    char *argv[] = {"cp", "-a", copied, target, NULL};
    char *envp[] = {"PATH=/usr/bin:/bin", NULL};
    pid_t pid;
    if (posix_spawn(&pid, "/bin/cp", NULL, NULL, argv, envp) == 0) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
    }
}

static void hit(const char *kind, const char *path) {
    int saved = errno;
    if (snapshots[0]) pthread_mutex_lock(&one_at_a_time);
    long n = __atomic_add_fetch(&counter, 1, __ATOMIC_SEQ_CST);
    if (snapshots[0]) {
        snapshot(n);
        pthread_mutex_unlock(&one_at_a_time);
    }
    errno = saved;
    if (log_fd >= 0) {
        char line[PATH_MAX + 64];
        int len = snprintf(line, sizeof line, "%ld %s %s\n", n, kind, path);
        if (len > (int)sizeof line) len = sizeof line;
        syscall(SYS_write, log_fd, line, (size_t)len);
    }
    if (fault_at && n == fault_at) kill(getpid(), fault_signal);
}

static void at_path(const char *kind, int dirfd, const char *path) {
    char abs[PATH_MAX];
    if (roots[0] && absolute(dirfd, path, abs, sizeof abs) && under_roots(abs)) hit(kind, abs);
}

static void at_fd(const char *kind, int fd) {
    if (!roots[0] || fd < 0) return;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n < 0) return;
    path[n] = 0;
    if (under_roots(path)) hit(kind, path);
}

/* a create counts when it makes a file or truncates one */
static void at_open(int dirfd, const char *path, int flags) {
    if (!roots[0] || !(flags & (O_CREAT | O_TRUNC))) return;
    char abs[PATH_MAX];
    if (!absolute(dirfd, path, abs, sizeof abs) || !under_roots(abs)) return;
    struct stat st;
    if ((flags & O_TRUNC) || stat(abs, &st) != 0) hit((flags & O_TRUNC) ? "truncate-open" : "create", abs);
}

#define REAL(ret, name, ...)                                            \
    static ret (*real_##name)(__VA_ARGS__);                             \
    if (!real_##name) real_##name = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name)

ssize_t write(int fd, const void *buf, size_t n) {
    REAL(ssize_t, write, int, const void *, size_t);
    at_fd("write", fd);
    return real_write(fd, buf, n);
}
ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    REAL(ssize_t, pwrite, int, const void *, size_t, off_t);
    at_fd("write", fd);
    return real_pwrite(fd, buf, n, off);
}
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) {
    REAL(ssize_t, pwrite64, int, const void *, size_t, off_t);
    at_fd("write", fd);
    return real_pwrite64(fd, buf, n, off);
}
ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    REAL(ssize_t, writev, int, const struct iovec *, int);
    at_fd("write", fd);
    return real_writev(fd, iov, cnt);
}
ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) {
    REAL(ssize_t, pwritev, int, const struct iovec *, int, off_t);
    at_fd("write", fd);
    return real_pwritev(fd, iov, cnt, off);
}
ssize_t sendfile(int out, int in, off_t *off, size_t n) {
    REAL(ssize_t, sendfile, int, int, off_t *, size_t);
    at_fd("write", out);
    return real_sendfile(out, in, off, n);
}
ssize_t sendfile64(int out, int in, off_t *off, size_t n) {
    REAL(ssize_t, sendfile64, int, int, off_t *, size_t);
    at_fd("write", out);
    return real_sendfile64(out, in, off, n);
}
ssize_t copy_file_range(int in, off_t *oi, int out, off_t *oo, size_t n, unsigned int f) {
    REAL(ssize_t, copy_file_range, int, off_t *, int, off_t *, size_t, unsigned int);
    at_fd("write", out);
    return real_copy_file_range(in, oi, out, oo, n, f);
}
int ftruncate(int fd, off_t len) {
    REAL(int, ftruncate, int, off_t);
    at_fd("truncate", fd);
    return real_ftruncate(fd, len);
}
int ftruncate64(int fd, off_t len) {
    REAL(int, ftruncate64, int, off_t);
    at_fd("truncate", fd);
    return real_ftruncate64(fd, len);
}
int truncate(const char *path, off_t len) {
    REAL(int, truncate, const char *, off_t);
    at_path("truncate", AT_FDCWD, path);
    return real_truncate(path, len);
}
int fsync(int fd) {
    REAL(int, fsync, int);
    at_fd("fsync", fd);
    return real_fsync(fd);
}
int fdatasync(int fd) {
    REAL(int, fdatasync, int);
    at_fd("fsync", fd);
    return real_fdatasync(fd);
}

#define OPEN_MODE                          \
    mode_t mode = 0;                       \
    if (flags & (O_CREAT | __O_TMPFILE)) { \
        va_list ap;                        \
        va_start(ap, flags);               \
        mode = va_arg(ap, mode_t);         \
        va_end(ap);                        \
    }

int open(const char *path, int flags, ...) {
    REAL(int, open, const char *, int, mode_t);
    OPEN_MODE
    at_open(AT_FDCWD, path, flags);
    return real_open(path, flags, mode);
}
int open64(const char *path, int flags, ...) {
    REAL(int, open64, const char *, int, mode_t);
    OPEN_MODE
    at_open(AT_FDCWD, path, flags);
    return real_open64(path, flags, mode);
}
int openat(int dirfd, const char *path, int flags, ...) {
    REAL(int, openat, int, const char *, int, mode_t);
    OPEN_MODE
    at_open(dirfd, path, flags);
    return real_openat(dirfd, path, flags, mode);
}
int openat64(int dirfd, const char *path, int flags, ...) {
    REAL(int, openat64, int, const char *, int, mode_t);
    OPEN_MODE
    at_open(dirfd, path, flags);
    return real_openat64(dirfd, path, flags, mode);
}
int creat(const char *path, mode_t mode) {
    REAL(int, creat, const char *, mode_t);
    at_open(AT_FDCWD, path, O_CREAT | O_TRUNC);
    return real_creat(path, mode);
}
int mkdir(const char *path, mode_t mode) {
    REAL(int, mkdir, const char *, mode_t);
    at_path("mkdir", AT_FDCWD, path);
    return real_mkdir(path, mode);
}
int mkdirat(int dirfd, const char *path, mode_t mode) {
    REAL(int, mkdirat, int, const char *, mode_t);
    at_path("mkdir", dirfd, path);
    return real_mkdirat(dirfd, path, mode);
}
int rename(const char *a, const char *b) {
    REAL(int, rename, const char *, const char *);
    at_path("rename", AT_FDCWD, b);
    return real_rename(a, b);
}
int renameat(int fa, const char *a, int fb, const char *b) {
    REAL(int, renameat, int, const char *, int, const char *);
    at_path("rename", fb, b);
    return real_renameat(fa, a, fb, b);
}
int renameat2(int fa, const char *a, int fb, const char *b, unsigned int flags) {
    REAL(int, renameat2, int, const char *, int, const char *, unsigned int);
    at_path(flags & 2 ? "exchange" : "rename", fb, b);
    return real_renameat2(fa, a, fb, b, flags);
}
int link(const char *a, const char *b) {
    REAL(int, link, const char *, const char *);
    at_path("link", AT_FDCWD, b);
    return real_link(a, b);
}
int linkat(int fa, const char *a, int fb, const char *b, int flags) {
    REAL(int, linkat, int, const char *, int, const char *, int);
    at_path("link", fb, b);
    return real_linkat(fa, a, fb, b, flags);
}
int symlink(const char *a, const char *b) {
    REAL(int, symlink, const char *, const char *);
    at_path("link", AT_FDCWD, b);
    return real_symlink(a, b);
}
int symlinkat(const char *a, int fb, const char *b) {
    REAL(int, symlinkat, const char *, int, const char *);
    at_path("link", fb, b);
    return real_symlinkat(a, fb, b);
}
int unlink(const char *path) {
    REAL(int, unlink, const char *);
    at_path("delete", AT_FDCWD, path);
    return real_unlink(path);
}
int unlinkat(int dirfd, const char *path, int flags) {
    REAL(int, unlinkat, int, const char *, int);
    at_path("delete", dirfd, path);
    return real_unlinkat(dirfd, path, flags);
}
int rmdir(const char *path) {
    REAL(int, rmdir, const char *);
    at_path("delete", AT_FDCWD, path);
    return real_rmdir(path);
}
int remove(const char *path) {
    REAL(int, remove, const char *);
    at_path("delete", AT_FDCWD, path);
    return real_remove(path);
}
