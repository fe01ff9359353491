/*
 * h2open: an open-loop HTTP/2 (h2c) load generator for `bench:server`'s fixed-rate latency runs.
 *
 * Why not h2load: its `--rps` sends each connection's budget as one burst per 10 ms timer tick, and its
 * `--timing-script-file` could not keep up past ~1,700 req/s per process here; both make the generator's
 * own bursts the p99. This sends requests at Poisson arrival times (exponential gaps from a fixed seed) at
 * a fixed total rate over a few connections, each request on time whatever the answers do (open loop), and
 * measures each one from the moment it was written to the end of its answer.
 *
 * It speaks just enough HTTP/2 for one fixed unary request (RFC 9113, HPACK RFC 7541): the preface, SETTINGS
 * (and their ACK), PING ACK, connection flow control both ways, and per request one HEADERS frame and one
 * DATA frame with END_STREAM. Request headers go into the HPACK dynamic table on each connection's first
 * request and are sent indexed afterwards, as real clients do. A stream ends at END_STREAM or RST_STREAM;
 * an answer counts as ok when its first HEADERS block starts with the indexed `:status: 200` (0x88).
 *
 * usage: h2open <host> <port> <path> <body file> <rate req/s> <connections> <warm-up s> <measured s> <seed>
 *               [header: value]...
 * prints one line:  sent=N done=N ok=N failed=N rate=R p50_us=X p99_us=Y p999_us=Z max_us=M lag_p99_us=L
 * (the counts and percentiles cover the measured window only; lag: how late the writes were against the
 * schedule, the generator's own delay). Exit 1 on a usage or connection error.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 64
#define MAX_HEADERS 16
#define MAX_STREAMS_PER_CONN 100 /* below the server's SETTINGS_MAX_CONCURRENT_STREAMS (128) */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what) {
  fprintf(stderr, "h2open: %s: %s\n", what, strerror(errno));
  exit(1);
}

typedef struct {
  unsigned char *data;
  size_t len, cap, off;
} buf_t;

static void buf_put(buf_t *b, const void *p, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < b->len + n) cap *= 2;
    b->data = realloc(b->data, cap);
    if (!b->data) die("realloc");
    b->cap = cap;
  }
  memcpy(b->data + b->len, p, n);
  b->len += n;
}

static void frame_header(buf_t *b, uint32_t len, uint8_t type, uint8_t flags, uint32_t stream) {
  unsigned char h[9] = {(unsigned char)(len >> 16), (unsigned char)(len >> 8), (unsigned char)len, type, flags,
                        (unsigned char)((stream >> 24) & 0x7f), (unsigned char)(stream >> 16), (unsigned char)(stream >> 8),
                        (unsigned char)stream};
  buf_put(b, h, 9);
}

/* HPACK integer with an n-bit prefix; `first` holds the pattern bits above the prefix. */
static void hpack_int(buf_t *b, unsigned first, int prefix, uint32_t v) {
  uint32_t max = (1u << prefix) - 1;
  unsigned char c;
  if (v < max) {
    c = (unsigned char)(first | v);
    buf_put(b, &c, 1);
    return;
  }
  c = (unsigned char)(first | max);
  buf_put(b, &c, 1);
  v -= max;
  while (v >= 128) {
    c = (unsigned char)((v & 0x7f) | 0x80);
    buf_put(b, &c, 1);
    v >>= 7;
  }
  c = (unsigned char)v;
  buf_put(b, &c, 1);
}

static void hpack_str(buf_t *b, const char *s) {
  size_t n = strlen(s);
  hpack_int(b, 0x00, 7, (uint32_t)n);
  buf_put(b, s, n);
}

typedef struct {
  int fd;
  buf_t out, in;
  int64_t send_window; /* connection-level window the server gave us */
  int in_flight;
  int first_sent;    /* the dynamic table holds our headers once the first request went out */
  int goaway;
  uint32_t next_stream;
  int queued; /* requests due but held back (streams or window exhausted) */
} conn_t;

typedef struct {
  uint64_t due, written; /* ns */
  int32_t latency_us;    /* -1: not done; -2: failed */
  int8_t status;         /* 0: no HEADERS yet; 1: :status 200; 2: another status */
} req_t;

static const char *names[MAX_HEADERS], *values[MAX_HEADERS];
static int nheaders;
static unsigned char *body;
static size_t body_len;
static req_t *reqs;
static size_t nreqs_max;

/* stream id -> request index: streams are 1, 3, 5... per connection; map with a per-connection table. */
static uint32_t *stream_req[MAX_CONNS];
static uint32_t stream_req_cap[MAX_CONNS];

static void write_request(conn_t *c, int ci, uint32_t req_index, uint64_t now) {
  uint32_t stream = c->next_stream;
  c->next_stream += 2;
  buf_t hb = {0};
  unsigned char m = 0x83, s = 0x86; /* :method POST, :scheme http (static table) */
  buf_put(&hb, &m, 1);
  buf_put(&hb, &s, 1);
  if (!c->first_sent) {
    /* literal with incremental indexing, new name: 0x40, name, value */
    for (int i = 0; i < nheaders; i++) {
      unsigned char k = 0x40;
      buf_put(&hb, &k, 1);
      hpack_str(&hb, names[i]);
      hpack_str(&hb, values[i]);
    }
    c->first_sent = 1;
  } else {
    /* indexed: the last inserted has index 62 */
    for (int i = 0; i < nheaders; i++) hpack_int(&hb, 0x80, 7, (uint32_t)(62 + (nheaders - 1 - i)));
  }
  frame_header(&c->out, (uint32_t)hb.len, 0x1, 0x4, stream); /* HEADERS, END_HEADERS */
  buf_put(&c->out, hb.data, hb.len);
  free(hb.data);
  frame_header(&c->out, (uint32_t)body_len, 0x0, 0x1, stream); /* DATA, END_STREAM */
  buf_put(&c->out, body, body_len);
  c->send_window -= (int64_t)body_len;
  c->in_flight++;
  uint32_t slot = stream / 2;
  if (slot >= stream_req_cap[ci]) {
    uint32_t cap = stream_req_cap[ci] ? stream_req_cap[ci] * 2 : 65536;
    while (cap <= slot) cap *= 2;
    stream_req[ci] = realloc(stream_req[ci], cap * sizeof(uint32_t));
    if (!stream_req[ci]) die("realloc");
    memset(stream_req[ci] + stream_req_cap[ci], 0xff, (cap - stream_req_cap[ci]) * sizeof(uint32_t));
    stream_req_cap[ci] = cap;
  }
  stream_req[ci][slot] = req_index;
  reqs[req_index].written = now;
}

static int flush_out(conn_t *c) {
  while (c->out.off < c->out.len) {
    ssize_t n = write(c->fd, c->out.data + c->out.off, c->out.len - c->out.off);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      return -1;
    }
    c->out.off += (size_t)n;
  }
  c->out.off = c->out.len = 0;
  return 1;
}

static size_t done_count, ok_count, failed_count;

static void finish(conn_t *c, int ci, uint32_t stream, int ok, uint64_t now) {
  uint32_t slot = stream / 2;
  if (slot >= stream_req_cap[ci]) return;
  uint32_t r = stream_req[ci][slot];
  if (r == UINT32_MAX) return;
  stream_req[ci][slot] = UINT32_MAX;
  c->in_flight--;
  if (ok) {
    uint64_t us = (now - reqs[r].written) / 1000;
    reqs[r].latency_us = us > INT32_MAX ? INT32_MAX : (int32_t)us;
  } else {
    reqs[r].latency_us = -2;
  }
}

/* Parses whole frames from c->in; answers SETTINGS and PING, tracks windows and stream ends. */
static int read_frames(conn_t *c, int ci, uint64_t now) {
  size_t p = 0;
  while (c->in.len - p >= 9) {
    unsigned char *h = c->in.data + p;
    uint32_t len = ((uint32_t)h[0] << 16) | ((uint32_t)h[1] << 8) | h[2];
    uint8_t type = h[3], flags = h[4];
    uint32_t stream = (((uint32_t)h[5] & 0x7f) << 24) | ((uint32_t)h[6] << 16) | ((uint32_t)h[7] << 8) | h[8];
    if (c->in.len - p < 9 + len) break;
    unsigned char *payload = h + 9;
    switch (type) {
      case 0x0: /* DATA: give the bytes back to the connection window (streams got 2^31-1 each) */
        if (len > 0) {
          unsigned char wu[4] = {(unsigned char)(len >> 24), (unsigned char)(len >> 16), (unsigned char)(len >> 8), (unsigned char)len};
          frame_header(&c->out, 4, 0x8, 0, 0);
          buf_put(&c->out, wu, 4);
        }
        if (flags & 0x1) finish(c, ci, stream, 1, now);
        break;
      case 0x1: { /* HEADERS */
        unsigned char *block = payload;
        if (flags & 0x8) block += 1;  /* PADDED */
        if (flags & 0x20) block += 5; /* PRIORITY */
        uint32_t slot = stream / 2;
        if (slot >= stream_req_cap[ci] || stream_req[ci][slot] == UINT32_MAX) break;
        req_t *r = &reqs[stream_req[ci][slot]];
        /* the first HEADERS of an answer must be :status 200 (indexed 0x88); later ones are trailers */
        if (r->status == 0) r->status = (block < payload + len && block[0] == 0x88) ? 1 : 2;
        if (flags & 0x1) finish(c, ci, stream, r->status == 1, now);
        break;
      }
      case 0x3: /* RST_STREAM */
        finish(c, ci, stream, 0, now);
        break;
      case 0x4: /* SETTINGS */
        if (!(flags & 0x1)) frame_header(&c->out, 0, 0x4, 0x1, 0);
        break;
      case 0x6: /* PING */
        if (!(flags & 0x1) && len == 8) {
          frame_header(&c->out, 8, 0x6, 0x1, 0);
          buf_put(&c->out, payload, 8);
        }
        break;
      case 0x7: /* GOAWAY */
        c->goaway = 1;
        break;
      case 0x8: /* WINDOW_UPDATE */
        if (stream == 0 && len == 4) {
          uint32_t inc = (((uint32_t)payload[0] & 0x7f) << 24) | ((uint32_t)payload[1] << 16) | ((uint32_t)payload[2] << 8) | payload[3];
          c->send_window += inc;
        }
        break;
      default:
        break;
    }
    p += 9 + len;
  }
  memmove(c->in.data, c->in.data + p, c->in.len - p);
  c->in.len -= p;
  return 0;
}

static int cmp_int(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

static int32_t pct(int32_t *sorted, size_t n, double q) {
  if (n == 0) return -1;
  size_t i = (size_t)ceil(q / 100.0 * (double)n);
  if (i < 1) i = 1;
  if (i > n) i = n;
  return sorted[i - 1];
}

int main(int argc, char **argv) {
  if (argc < 10) {
    fprintf(stderr, "usage: h2open <host> <port> <path> <body file> <rate> <connections> <warm-up s> <measured s> <seed> [header: value]...\n");
    return 1;
  }
  const char *host = argv[1];
  int port = atoi(argv[2]);
  const char *path = argv[3];
  double rate = atof(argv[5]);
  int nconns = atoi(argv[6]);
  double warmup = atof(argv[7]), measured = atof(argv[8]);
  uint64_t seed = strtoull(argv[9], NULL, 10);
  if (port <= 0 || rate <= 0 || nconns < 1 || nconns > MAX_CONNS || warmup < 0 || measured <= 0) {
    fprintf(stderr, "h2open: bad arguments\n");
    return 1;
  }
  FILE *bf = fopen(argv[4], "rb");
  if (!bf) die("body file");
  body = malloc(1 << 20);
  body_len = fread(body, 1, 1 << 20, bf);
  fclose(bf);

  static char authority[300];
  snprintf(authority, sizeof authority, "%s:%d", host, port);
  names[nheaders] = ":path";
  values[nheaders++] = path;
  names[nheaders] = ":authority";
  values[nheaders++] = authority;
  for (int i = 10; i < argc && nheaders < MAX_HEADERS; i++) {
    char *colon = strchr(argv[i], ':');
    if (!colon) continue;
    *colon = 0;
    char *v = colon + 1;
    while (*v == ' ') v++;
    names[nheaders] = argv[i];
    values[nheaders++] = v;
  }
  names[nheaders] = "user-agent";
  values[nheaders++] = "h2open";

  double total_s = warmup + measured;
  nreqs_max = (size_t)(rate * total_s * 1.2) + 1000;
  reqs = calloc(nreqs_max, sizeof(req_t));
  if (!reqs) die("calloc");

  int ep = epoll_create1(0);
  conn_t conns[MAX_CONNS];
  memset(conns, 0, sizeof conns);
  for (int i = 0; i < nconns; i++) {
    conn_t *c = &conns[i];
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
      fprintf(stderr, "h2open: host must be an IPv4 address\n");
      return 1;
    }
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a) < 0) die("connect");
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK) < 0) die("nonblock");
    c->next_stream = 1;
    c->send_window = 65535;
    buf_put(&c->out, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
    /* SETTINGS: ENABLE_PUSH 0, INITIAL_WINDOW_SIZE 2^31-1; then open the connection window wide */
    unsigned char settings[12] = {0, 2, 0, 0, 0, 0, 0, 4, 0x7f, 0xff, 0xff, 0xff};
    frame_header(&c->out, 12, 0x4, 0, 0);
    buf_put(&c->out, settings, 12);
    uint32_t inc = 0x7fffffff - 65535;
    unsigned char wu[4] = {(unsigned char)(inc >> 24), (unsigned char)(inc >> 16), (unsigned char)(inc >> 8), (unsigned char)inc};
    frame_header(&c->out, 4, 0x8, 0, 0);
    buf_put(&c->out, wu, 4);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.u32 = (uint32_t)i};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) die("epoll_ctl");
    stream_req[i] = NULL;
    stream_req_cap[i] = 0;
  }
  int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
  struct epoll_event tev = {.events = EPOLLIN, .data.u32 = 0xffffffffu};
  epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev);

  /* xorshift64* for the exponential gaps */
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  uint64_t start = now_ns() + 50000000ull; /* 50 ms to settle the connections */
  uint64_t end = start + (uint64_t)(total_s * 1e9);
  uint64_t measure_from = start + (uint64_t)(warmup * 1e9);
  uint64_t next_due = start;
  size_t nreqs = 0, next_to_send = 0;
  int rr = 0;
  struct epoll_event events[MAX_CONNS + 1];

  for (;;) {
    uint64_t now = now_ns();
    /* schedule arrivals up to now */
    while (next_due <= now && next_due < end && nreqs < nreqs_max) {
      reqs[nreqs].due = next_due;
      reqs[nreqs].latency_us = -1;
      nreqs++;
      x ^= x >> 12;
      x ^= x << 25;
      x ^= x >> 27;
      double u = ((double)((x * 0x2545F4914F6CDD1Dull) >> 11) + 0.5) / 9007199254740992.0;
      next_due += (uint64_t)(-log(u) / rate * 1e9);
    }
    /* send what is due, round robin over the connections that can take a stream */
    while (next_to_send < nreqs) {
      int sent = 0;
      for (int k = 0; k < nconns; k++) {
        conn_t *c = &conns[(rr + k) % nconns];
        if (c->goaway || c->in_flight >= MAX_STREAMS_PER_CONN || c->send_window < (int64_t)body_len) continue;
        write_request(c, (rr + k) % nconns, (uint32_t)next_to_send, now);
        rr = (rr + k + 1) % nconns;
        next_to_send++;
        sent = 1;
        break;
      }
      if (!sent) break;
    }
    for (int i = 0; i < nconns; i++)
      if (flush_out(&conns[i]) < 0) die("write");
    int finished = next_due >= end && next_to_send == nreqs;
    if (finished) {
      int open = 0;
      for (int i = 0; i < nconns; i++) open += conns[i].in_flight;
      if (open == 0 || now > end + 5000000000ull) break;
    }
    /* sleep until the next arrival or I/O */
    if (next_due < end) {
      struct itimerspec its = {0};
      its.it_value.tv_sec = (time_t)(next_due / 1000000000ull);
      its.it_value.tv_nsec = (long)(next_due % 1000000000ull);
      timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
    }
    int n = epoll_wait(ep, events, MAX_CONNS + 1, next_due < end ? -1 : 100);
    if (n < 0 && errno != EINTR) die("epoll_wait");
    now = now_ns();
    for (int e = 0; e < n; e++) {
      if (events[e].data.u32 == 0xffffffffu) {
        uint64_t ticks;
        (void)!read(tfd, &ticks, sizeof ticks);
        continue;
      }
      conn_t *c = &conns[events[e].data.u32];
      if (events[e].events & EPOLLIN) {
        for (;;) {
          if (c->in.cap - c->in.len < 65536) {
            size_t cap = c->in.cap ? c->in.cap * 2 : 262144;
            c->in.data = realloc(c->in.data, cap);
            c->in.cap = cap;
          }
          ssize_t r = read(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len);
          if (r > 0) {
            c->in.len += (size_t)r;
            continue;
          }
          if (r == 0) {
            c->goaway = 1;
            break;
          }
          if (errno == EAGAIN || errno == EWOULDBLOCK) break;
          die("read");
        }
        read_frames(c, (int)events[e].data.u32, now);
      }
    }
  }

  /* results over the measured window */
  int32_t *lat = malloc(sizeof(int32_t) * (nreqs + 1));
  int32_t *lag = malloc(sizeof(int32_t) * (nreqs + 1));
  size_t nl = 0, sent_measured = 0;
  for (size_t i = 0; i < nreqs; i++) {
    if (reqs[i].due < measure_from) continue;
    sent_measured++;
    if (reqs[i].written >= reqs[i].due) {
      uint64_t l = (reqs[i].written - reqs[i].due) / 1000;
      lag[sent_measured - 1] = l > INT32_MAX ? INT32_MAX : (int32_t)l;
    } else {
      lag[sent_measured - 1] = 0;
    }
    if (reqs[i].latency_us >= 0) {
      lat[nl++] = reqs[i].latency_us;
      ok_count++;
    } else {
      failed_count++;
    }
  }
  done_count = ok_count + failed_count;
  qsort(lat, nl, sizeof(int32_t), cmp_int);
  qsort(lag, sent_measured, sizeof(int32_t), cmp_int);
  printf("sent=%zu done=%zu ok=%zu failed=%zu rate=%.1f p50_us=%d p99_us=%d p999_us=%d max_us=%d lag_p99_us=%d\n", sent_measured, done_count,
         ok_count, failed_count, (double)ok_count / measured, pct(lat, nl, 50), pct(lat, nl, 99), pct(lat, nl, 99.9), nl ? lat[nl - 1] : -1,
         pct(lag, sent_measured, 99));
  return 0;
}
