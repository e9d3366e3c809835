/* Records inside a snapshot section: (tag u16, length u32, bytes), read back only within the section and the record. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/snap.h"

#define REC_HDR 6 /* tag u16 + length u32 */

void snap_rec_put(struct snap_rec_buf *b, u16 tag, const void *data, size_t len)
{
	size_t need;

	if (b->err)
		return;
	if (len > UINT32_MAX) {
		b->err = -E2BIG;
		return;
	}
	need = b->len + REC_HDR + len;
	if (need > b->cap) {
		size_t cap = MAX(need, b->cap * 2);
		u8 *nb = realloc(b->buf, cap);

		if (!nb) {
			b->err = -ENOMEM;
			return;
		}
		b->buf = nb;
		b->cap = cap;
	}
	le_store(b->buf + b->len, 2, tag);
	le_store(b->buf + b->len + 2, 4, (u32)len);
	if (len)
		memcpy(b->buf + b->len + REC_HDR, data, len);
	b->len = need;
}

void snap_rec_free(struct snap_rec_buf *b)
{
	free(b->buf);
	memset(b, 0, sizeof(*b));
}

int snap_rec_next(struct snap_rec_iter *it, u16 *tag, const void **data, u32 *len)
{
	u32 n;

	if (!it->left)
		return 0;
	if (it->left < REC_HDR)
		return -EBADMSG;
	n = le_load(it->p + 2, 4);
	if (n > it->left - REC_HDR)
		return -EBADMSG;
	*tag = (u16)le_load(it->p, 2);
	*len = n;
	*data = it->p + REC_HDR;
	it->p += REC_HDR + n;
	it->left -= REC_HDR + n;
	return 1;
}

int snap_rec_get(const void *sec, size_t sec_len, u16 tag, void *out, size_t len)
{
	struct snap_rec_iter it = { sec, sec_len };
	const void *d, *found = NULL;
	u32 n, found_len = 0;
	u16 t;
	int r;

	/* The whole section is walked before anything is copied: a malformed tail fails every
	 * get, and out is untouched on failure. */
	while ((r = snap_rec_next(&it, &t, &d, &n)) > 0) {
		if (t == tag && !found) {
			found = d;
			found_len = n;
		}
	}
	if (r < 0)
		return r;
	if (!found)
		return -ENOENT;
	if (found_len != len)
		return -EBADMSG;
	memcpy(out, found, len);
	return 0;
}

int snap_rec_words(const void *sec, size_t sec_len, u16 tag, size_t max, char ***words, int *n)
{
	struct snap_rec_iter it = { sec, sec_len };
	const char *d = NULL;
	const void *p;
	u32 len = 0, count = 0;
	u16 t;
	int r;

	*words = NULL;
	*n = 0;
	while ((r = snap_rec_next(&it, &t, &p, &len)) > 0 && t != tag)
		;
	if (r < 0)
		return r;
	if (r == 0)
		return -ENOENT;
	d = p;
	if (!len || len > max || d[len - 1])
		return -EBADMSG;
	for (u32 i = 0; i < len; i++)
		count += !d[i];
	*words = calloc((size_t)count + 1, sizeof(char *));
	if (!*words)
		return -ENOMEM;
	for (u32 i = 0; i < len; i += (u32)strlen(d + i) + 1) {
		(*words)[*n] = strdup(d + i);
		if (!(*words)[(*n)++]) {
			snap_words_free(*words, *n);
			*words = NULL;
			*n = 0;
			return -ENOMEM;
		}
	}
	return 0;
}

void snap_words_free(char **words, int n)
{
	for (int i = 0; words && i < n; i++)
		free(words[i]);
	free(words);
}
