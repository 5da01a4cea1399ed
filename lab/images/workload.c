/* The lab's workload (image gpusplit.lab/workload): it reports what its container was given, one
 * line each, then exits 0 or, with the argument "wait", waits until SIGTERM or SIGINT:
 *   env NAME=VALUE      its environment, in the order the runtime set it
 *   device /dev/NAME    each NVIDIA device node the runtime made in its /dev
 *   mount TARGET        each mount of its mount namespace under /proc/driver/nvidia or naming nvidia
 * Read from the container's log (the kubelet's pod log, or `kubectl logs`). */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static void on_stop(int sig) {
  (void)sig;
  _exit(0);
}

int main(int argc, char **argv) {
  for (char **e = environ; *e; e++) printf("env %s\n", *e);
  DIR *dev = opendir("/dev");
  if (dev) {
    struct dirent *d;
    while ((d = readdir(dev)) != NULL)
      if (strncmp(d->d_name, "nvidia", 6) == 0) printf("device /dev/%s\n", d->d_name);
    closedir(dev);
  }
  FILE *mounts = fopen("/proc/self/mounts", "r");
  if (mounts) {
    char line[4096], src[1024], target[1024];
    while (fgets(line, sizeof line, mounts))
      if (sscanf(line, "%1023s %1023s", src, target) == 2 && strstr(target, "nvidia"))
        printf("mount %s\n", target);
    fclose(mounts);
  }
  printf("done\n");
  fflush(stdout);
  if (argc > 1 && strcmp(argv[1], "wait") == 0) {
    signal(SIGTERM, on_stop);
    signal(SIGINT, on_stop);
    for (;;) pause();
  }
  return 0;
}
