/* Test helper: print every UDP datagram received on a port, for a bounded time (netconsole receiver). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	time_t end;
	char buf[2048];
	int fd, one = 1;

	if (argc != 3) {
		fprintf(stderr, "usage: udp-sink PORT SECONDS\n");
		return 2;
	}
	a.sin_port = htons((unsigned short)atoi(argv[1]));
	end = time(NULL) + atoi(argv[2]);
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("udp-sink");
		return 1;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	while (time(NULL) < end) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 500) <= 0)
			continue;
		n = recv(fd, buf, sizeof(buf), 0);
		if (n > 0)
			fwrite(buf, 1, (size_t)n, stdout);
	}
	return 0;
}
