/* What gdb/server.c (sockets, thread, stops) and gdb/commands.c (the answers to gdb's commands) share. */
#ifndef LKVM_GDB_SERVER_PRIV_H
#define LKVM_GDB_SERVER_PRIV_H

#include <pthread.h>
#include <stdatomic.h>

#include "lkvm/gdb-rsp.h"

struct gdb_server {
	const struct gdb_target_ops *ops;
	void *ctx;
	int listen_fd, client_fd, wake_fd;
	bool own_wake;	     /* wake_fd is ours to close (attach_fd: the caller's, reused) */
	char unix_path[108]; /* "": a TCP listener; else the socket to remove at the end */
	pthread_t thread;
	bool thread_up; /* gdb_server_run started it */
	/* unix_path's remover (spawn_remover): the child and our end of its pipe, or -1. */
	pid_t remover;
	int remover_fd;
	/* gdb_server_attach_fd: no listener, one client; the thread ends when it goes. */
	bool one_shot;
	atomic_bool ended; /* the thread has ended (gdb_server_ended) */

	/* Set by notify_stop and stop (any thread), taken by the server's thread. */
	pthread_mutex_t lock;
	bool has_pending, quit;
	struct gdb_stop pending;

	/* The session: the server's thread alone touches these. */
	bool session; /* the VM was stopped for this client (attach_fd: at its first byte) */
	struct gdb_rx rx;
	bool no_ack;	      /* QStartNoAckMode: no '+'/'-' either way from now on */
	bool running;	      /* resumed: only a stop or gdb's Ctrl-C comes next */
	bool broken;	      /* a send failed: drop the client */
	int g_thread;	      /* Hg: the thread g, p, m, ... act on */
	int c_thread;	      /* Hc: the thread s steps (-1: all) */
	int next_info;	      /* qsThreadInfo's next thread */
	struct gdb_stop last; /* what '?' answers */
	char *xml;	      /* target.xml, written once at start */
	size_t xml_len;
	char reply[GDB_REPLY_MAX]; /* the reply being built */
	size_t reply_len;
	char frame[GDB_FRAME_MAX]; /* the last reply sent, again on gdb's '-' */
	size_t frame_len;
	u8 mem[GDB_PACKET_MAX]; /* m, M: the guest's bytes */
	struct ratelimit rl;	/* client-triggered messages */

	atomic_ullong stops, breakpoints_hit, steps, packets, bad_packets, clients;
};

/* What a command handler leaves the session to do. */
enum gdb_after {
	GDB_REPLY,	 /* send s->reply */
	GDB_NO_REPLY,	 /* resumed: the stop is the reply */
	GDB_REPLY_CLOSE, /* D: send OK, close the client */
	GDB_CLOSE,	 /* k: close the client */
};

/* Answer one parsed command (gdb/commands.c): fills s->reply. */
enum gdb_after gdb_command(struct gdb_server *s, const struct gdb_cmd *cmd);
/* A stop reply for st into s->reply; counted (stops, breakpoints hit) once, when first reported. */
void gdb_stop_reply(struct gdb_server *s, const struct gdb_stop *st);
void gdb_count_stop(struct gdb_server *s, const struct gdb_stop *st);
/* Take the pending stop, if any (under the lock). */
bool gdb_take_pending(struct gdb_server *s, struct gdb_stop *st);

#endif
