/* lkvm-init's virtio-serial ports: a port of lkvm's found by its name in sysfs and its /dev node opened. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ports.h"

#define PORTS_DIR "/sys/class/virtio-ports"
#define POLL_MS 2

/* The port whose name file holds `name` (and a newline), into dev; 0 or -ENOENT. */
static int find_port(const char *name, char *dev, size_t len)
{
	DIR *d = opendir(PORTS_DIR);
	struct dirent *e;
	int ret = -ENOENT;

	if (!d)
		return -ENOENT;
	while (ret && (e = readdir(d))) {
		char path[300], buf[64];
		ssize_t n;
		int fd;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), PORTS_DIR "/%s/name", e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue; /* not named yet: the file comes with PORT_NAME */
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		buf[strcspn(buf, "\n")] = '\0';
		if (!strcmp(buf, name)) {
			snprintf(dev, len, "/dev/%s", e->d_name);
			ret = 0;
		}
	}
	closedir(d);
	return ret;
}

int port_open(const char *name, int wait_ms)
{
	struct timespec step = { 0, POLL_MS * 1000000L };
	char dev[300];

	for (int waited = 0; find_port(name, dev, sizeof(dev)); waited += POLL_MS) {
		if (waited >= wait_ms)
			return -ENOENT;
		nanosleep(&step, NULL);
	}
	/* The node is made with the port (PORT_ADD), before its name. */
	for (int waited = 0;; waited += POLL_MS) {
		int fd = open(dev, O_WRONLY | O_NOCTTY | O_CLOEXEC);

		if (fd >= 0 || errno != ENOENT || waited >= wait_ms)
			return fd >= 0 ? fd : -errno;
		nanosleep(&step, NULL);
	}
}
