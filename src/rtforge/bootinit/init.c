/* /init of rtforge's boot-test initramfs: process 1 of an emulated machine.
 *
 * It reports what kernel is running (uname, /sys/kernel/realtime, the page
 * size user space gets), loads the modules given to it (/modules/\*.ko, with
 * finit_module: no kmod here) and lists /proc/modules, runs the probe for a
 * few seconds, prints the probe's files to the console between markers the
 * host parses, and powers off.  Static, no shell, no libraries: the
 * initramfs holds only this, the probe and the modules.
 *
 * Kernel command line: rtforge.probe_s=N (default 3).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

static void dump(const char *path, const char *tag)
{
    char buf[4096];
    int fd = open(path, O_RDONLY);
    printf("RTFORGE-BEGIN %s\n", tag);
    fflush(stdout);
    if (fd >= 0) {
        ssize_t n;
        while ((n = read(fd, buf, sizeof buf)) > 0)
            fwrite(buf, 1, (size_t)n, stdout);
        close(fd);
    }
    printf("\nRTFORGE-END %s\n", tag);
    fflush(stdout);
}

static int probe_seconds(void)
{
    char line[4096] = "";
    int fd = open("/proc/cmdline", O_RDONLY);
    if (fd >= 0) {
        ssize_t n = read(fd, line, sizeof line - 1);
        line[n > 0 ? n : 0] = 0;
        close(fd);
    }
    const char *p = strstr(line, "rtforge.probe_s=");
    int s = p ? atoi(p + strlen("rtforge.probe_s=")) : 3;
    return s > 0 && s < 3600 ? s : 3;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int is_module(const struct dirent *e)
{
    size_t n = strlen(e->d_name);
    return n > 3 && strcmp(e->d_name + n - 3, ".ko") == 0;
}

/* Each /modules/NAME.ko through finit_module(2), in name order: the boot
 * test's proof that a module built against the bundle's headers loads. */
static void load_modules(void)
{
    struct dirent **names;
    int n = scandir("/modules", &names, is_module, by_name);
    for (int i = 0; i < n; i++) {
        char path[512];
        snprintf(path, sizeof path, "/modules/%s", names[i]->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        long rc = fd < 0 ? -1 : syscall(SYS_finit_module, fd, "", 0);
        int err = rc == 0 ? 0 : errno;
        printf("RTFORGE-INSMOD %s %d %s\n", names[i]->d_name, err, err ? strerror(err) : "loaded");
        if (fd >= 0)
            close(fd);
        free(names[i]);
    }
    if (n >= 0) {
        free(names);
        dump("/proc/modules", "proc-modules");
    }
}

int main(void)
{
    mkdir("/proc", 0755);
    mkdir("/sys", 0755);
    mkdir("/dev", 0755);
    mkdir("/tmp", 01777);
    mount("proc", "/proc", "proc", 0, NULL);
    mount("sysfs", "/sys", "sysfs", 0, NULL);
    mount("devtmpfs", "/dev", "devtmpfs", 0, NULL);
    mount("tmpfs", "/tmp", "tmpfs", 0, NULL);
    /* The initramfs may lack /dev/console; devtmpfs has it. */
    int con = open("/dev/console", O_RDWR);
    if (con >= 0) {
        dup2(con, 0);
        dup2(con, 1);
        dup2(con, 2);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);

    struct utsname u;
    uname(&u);
    printf("RTFORGE-UNAME-R %s\nRTFORGE-UNAME-V %s\nRTFORGE-UNAME-M %s\n", u.release, u.version, u.machine);
    char rt[16] = "absent";
    int fd = open("/sys/kernel/realtime", O_RDONLY);
    if (fd >= 0) {
        ssize_t n = read(fd, rt, sizeof rt - 1);
        rt[n > 0 ? n : 0] = 0;
        rt[strcspn(rt, "\n")] = 0;
        close(fd);
    }
    printf("RTFORGE-REALTIME %s\n", rt);
    /* The page size the kernel gives user space (its auxiliary vector's
     * AT_PAGESZ): 4096, or 16384 for a Pi 5 kernel with 16K pages. */
    printf("RTFORGE-PAGESIZE %ld\n", sysconf(_SC_PAGESIZE));
    load_modules();

    char secs[16];
    snprintf(secs, sizeof secs, "%d", probe_seconds());
    pid_t pid = fork();
    if (pid == 0) {
        execl("/rtprobe", "rtprobe", "--out", "/tmp/run", "--duration-s", secs, "--interval-us", "1000",
              "--checkpoint-s", "1", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    printf("RTFORGE-PROBE-EXIT %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    dump("/tmp/run/probe.json", "probe.json");
    dump("/tmp/run/series.jsonl", "series.jsonl");
    dump("/tmp/run/telemetry.jsonl", "telemetry.jsonl");
    printf("RTFORGE-DONE\n");
    fflush(stdout);
    sync();
    reboot(RB_POWER_OFF);
    for (;;)
        pause(); /* some machines (raspi3b) only halt: the host stops QEMU */
}
