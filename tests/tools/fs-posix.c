/* POSIX cases a shared file system must keep (run in the guest on a share by test-run.sh): an open file unlinked, renamed over, hard-linked, and written through a shared mapping. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int failed;

#define CHECK(cond, ...)                                                          \
	do {                                                                      \
		if (!(cond)) {                                                    \
			fprintf(stderr, "fs-posix: %s:%d: ", __func__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                             \
			fprintf(stderr, " (errno %s)\n", strerror(errno));        \
			failed = 1;                                               \
			return;                                                   \
		}                                                                 \
	} while (0)

static int make(const char *path, const char *text)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);

	if (fd >= 0 && write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* open, unlink, then fstat and read through the descriptor. */
static void unlinked_open(void)
{
	char buf[16] = "";
	struct stat st;
	int fd = make("unlinked", "still here");

	CHECK(fd >= 0, "create");
	CHECK(unlink("unlinked") == 0, "unlink");
	CHECK(access("unlinked", F_OK) < 0, "the name is still there");
	CHECK(fstat(fd, &st) == 0 && st.st_size == 10, "fstat after unlink: size %lld",
	      (long long)st.st_size);
	CHECK(pread(fd, buf, sizeof(buf) - 1, 0) == 10 && !strcmp(buf, "still here"),
	      "read after unlink: '%s'", buf);
	close(fd);
}

/* rename over a file that is open: the open one still reads its old contents. */
static void rename_over_open(void)
{
	char buf[16] = "";
	int old = make("target", "old"), fd = make("source", "new");

	CHECK(old >= 0 && fd >= 0, "create");
	close(fd);
	CHECK(rename("source", "target") == 0, "rename");
	CHECK(pread(old, buf, sizeof(buf) - 1, 0) == 3 && !strcmp(buf, "old"),
	      "the open file reads '%s'", buf);
	fd = open("target", O_RDONLY);
	memset(buf, 0, sizeof(buf));
	CHECK(fd >= 0 && read(fd, buf, sizeof(buf) - 1) == 3 && !strcmp(buf, "new"),
	      "the name reads '%s'", buf);
	close(fd);
	close(old);
	unlink("target");
}

/* A hard link: both names one inode, nlink 2, a write through one seen through the other. */
static void hard_link(void)
{
	struct stat a, b;
	char buf[16] = "";
	int fd = make("one", "linked");

	CHECK(fd >= 0, "create");
	close(fd);
	CHECK(link("one", "two") == 0, "link");
	CHECK(stat("one", &a) == 0 && stat("two", &b) == 0, "stat");
	CHECK(a.st_ino == b.st_ino && a.st_nlink == 2, "ino %llu/%llu nlink %lu",
	      (unsigned long long)a.st_ino, (unsigned long long)b.st_ino,
	      (unsigned long)a.st_nlink);
	fd = open("two", O_RDONLY);
	CHECK(fd >= 0 && read(fd, buf, sizeof(buf) - 1) == 6 && !strcmp(buf, "linked"),
	      "'two' reads '%s'", buf);
	close(fd);
	unlink("one");
	unlink("two");
}

/* A MAP_SHARED write, msync'ed, read back with read(). */
static void mmap_shared(void)
{
	char buf[16] = "";
	int fd = make("mapped", "xxxxxxxx");
	char *m;

	CHECK(fd >= 0, "create");
	m = mmap(NULL, 8, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(m != MAP_FAILED, "mmap");
	memcpy(m, "mmapped!", 8);
	CHECK(msync(m, 8, MS_SYNC) == 0, "msync");
	munmap(m, 8);
	CHECK(pread(fd, buf, 8, 0) == 8 && !strcmp(buf, "mmapped!"), "read() sees '%s'", buf);
	close(fd);
	unlink("mapped");
}

int main(int argc, char **argv)
{
	if (argc != 2 || chdir(argv[1])) {
		fprintf(stderr, "usage: fs-posix DIR (a writable directory)\n");
		return 2;
	}
	unlinked_open();
	rename_over_open();
	hard_link();
	mmap_shared();
	if (!failed)
		printf("fs-posix: ok\n");
	return failed;
}
