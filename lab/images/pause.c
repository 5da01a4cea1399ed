/* The lab's pause program: the process that holds a pod's namespaces (the infra container of
 * every pod on the lab's real node, image gpusplit.lab/pause). It waits for signals: SIGINT and
 * SIGTERM end it, and as PID 1 of the pod's PID namespace it reaps any child that is handed to it. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop = {.sa_handler = on_stop};
  struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
  if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0 ||
      sigaction(SIGCHLD, &child, NULL) < 0) {
    perror("pause: sigaction");
    return 1;
  }
  if (getpid() != 1) fprintf(stderr, "pause: not PID 1 of its namespace\n");
  for (;;) pause();
}
