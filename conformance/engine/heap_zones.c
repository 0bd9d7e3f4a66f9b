// Red zones and a quarantine for the heap blocks of a backend's own libraries (engine/heap.py).
//
// A device whose memory comes from the C allocator (malloc, posix_memalign, aligned_alloc,
// operator new) has no red zones of its own: a kernel that writes past the end of its output
// smashes malloc's metadata of the next chunk, and glibc notices later, in another op, or never.
// This library is loaded into the process that runs the cases and rewrites the GOT entries of
// the backend's shared objects (the libraries of its package, found by engine/heap.py) for the
// allocation functions they import, so that every block those libraries allocate gets:
//
// - a red zone of PAD bytes after its end, filled with 0xCD, checked at its free (and again in
//   the quarantine); an overflow up to PAD bytes lands there, harmless, and is reported with the
//   block's size and the bytes written past its end;
// - on free, its bytes filled with 0xDD and the block held in a quarantine (the last QUARANTINE
//   blocks, at most QUARANTINE_BYTES) before it is really freed, checked on demand (hz_check:
//   after every sample) and when it leaves: a write into a freed block (use after free) changes
//   the fill and is reported; a second free of it is a double free.
//
// Live blocks are never read except at their own free. A block of ours may be freed by code
// outside the watched libraries (a C++ object deleted by torch's virtual destructor, a string
// handed to torch): the `free` and `realloc` imports of every other library of the process are
// rewritten too (hz_observe_others), so such a free is seen, and the block checked, as ours.
// Without that, its entry would go stale, its address be reused by some other library's larger
// block, and that block's own bytes, freed later through a watched library, read as a write past
// the end of ours (a false overflow, seen once in 13,000 cases with echo_npu's worker threads).
// Libraries loaded after the last hz_observe_others call, and libc's own internal frees, are not
// seen: for them a stale entry is still recognised when the reused block is smaller than ours.
//
// The user pointer is the pointer the real allocator returned (the red zone is after the block,
// none before it), so a block the backend hands to code outside its libraries can still be
// freed there with the real free. Blocks are known by pointer in a hash table; a pointer the
// table does not know (allocated before the hooks, or by other libraries) is passed to the real
// functions untouched. Only GOT entries of the listed libraries change: torch's, Python's and
// libc's own allocations are not touched. Thread-safe (one mutex); never allocates through the
// hooks itself.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAD 256
#define PAD_BYTE 0xCD
#define FREED_BYTE 0xDD
#define QUARANTINE 256
#define QUARANTINE_BYTES (4u << 20)
#define FILL_LIMIT (4u << 20)  // larger blocks are not quarantined (their fill costs too much)
#define MAX_ERRORS 64

typedef struct {
  char kind[16];      // "overflow", "use-after-free", "double-free"
  size_t size;        // the block's size
  size_t first;       // offset of the first bad byte (from the block's end for an overflow)
  size_t bad;         // bytes that differ from the fill
  char when[16];      // "at free", "at check", "evicted"
  char library[128];  // the library whose call allocated it
} hz_error;

typedef struct {
  void* p;
  size_t n;
  void* caller;  // the return address of the allocating call (its library names the block)
  int object;    // allocated by operator new: a C++ object, not counted as device memory
} block;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void* (*real_malloc)(size_t);
static void (*real_free)(void*);
static void* (*real_realloc)(void*, size_t);
static int (*real_posix_memalign)(void**, size_t, size_t);
static void* (*real_aligned_alloc)(size_t, size_t);
static void* (*real_memalign)(size_t, size_t);
static size_t (*real_usable)(void*);

// live blocks: open addressing by pointer (tombstones marked by n == SIZE_MAX)
static block* table;
static size_t capacity, used, live;
static block quarantine[QUARANTINE];
static size_t q_head, q_count, q_bytes;
static hz_error errors[MAX_ERRORS];
static int n_errors, dropped_errors;
static unsigned long long n_allocs, n_frees, max_bytes;
static unsigned char pad_fill[PAD];
static unsigned char freed_fill[4096];

static size_t hash(void* p) {
  uintptr_t x = (uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x;
}

// Live blocks per hash slot (a counting filter, updated under `lock`): a free by another
// library whose slot counts none is not ours, and goes to the real free without the lock.
#define FILTER_BITS 18
static uint16_t filter[1u << FILTER_BITS];

static uint16_t* slot_of(void* p) { return &filter[(hash(p) >> 40) & ((1u << FILTER_BITS) - 1)]; }

static int maybe_ours(void* p) { return __atomic_load_n(slot_of(p), __ATOMIC_ACQUIRE) != 0; }

static void grow(void) {
  size_t old = capacity;
  block* prev = table;
  capacity = capacity ? capacity * 2 : 4096;
  table = real_malloc(capacity * sizeof(block));
  memset(table, 0, capacity * sizeof(block));
  used = live = 0;
  for (size_t i = 0; i < old; ++i) {
    if (prev[i].p && prev[i].n != SIZE_MAX) {
      size_t j = hash(prev[i].p) & (capacity - 1);
      while (table[j].p) j = (j + 1) & (capacity - 1);
      table[j] = prev[i];
      ++used;
      ++live;
    }
  }
  if (prev) real_free(prev);
}

static void add(void* p, size_t n, void* caller, int object) {
  if ((used + 1) * 2 > capacity) grow();
  size_t j = hash(p) & (capacity - 1), free_slot = SIZE_MAX;
  while (table[j].p) {
    if (table[j].p == p && table[j].n != SIZE_MAX) {  // freed behind our back, now reused
      table[j] = (block){p, n, caller, object};
      return;
    }
    if (table[j].n == SIZE_MAX && free_slot == SIZE_MAX) free_slot = j;
    j = (j + 1) & (capacity - 1);
  }
  if (free_slot != SIZE_MAX) {
    j = free_slot;
  } else {
    ++used;
  }
  table[j] = (block){p, n, caller, object};
  ++live;
  __atomic_add_fetch(slot_of(p), 1, __ATOMIC_RELEASE);
}

static int take(void* p, block* out) {  // remove p; 1 if it was ours
  if (!capacity) return 0;
  size_t j = hash(p) & (capacity - 1);
  while (table[j].p) {
    if (table[j].p == p && table[j].n != SIZE_MAX) {
      *out = table[j];
      table[j].n = SIZE_MAX;
      --live;
      __atomic_sub_fetch(slot_of(p), 1, __ATOMIC_RELEASE);
      return 1;
    }
    j = (j + 1) & (capacity - 1);
  }
  return 0;
}

static void record(const char* kind, const block* b, size_t first, size_t bad, const char* when) {
  if (n_errors >= MAX_ERRORS) {
    ++dropped_errors;
    return;
  }
  hz_error* e = &errors[n_errors++];
  snprintf(e->kind, sizeof e->kind, "%s", kind);
  e->size = b->n;
  e->first = first;
  e->bad = bad;
  snprintf(e->when, sizeof e->when, "%s", when);
  Dl_info info;
  const char* where = "?";
  if (b->caller && dladdr(b->caller, &info) && info.dli_fname) where = info.dli_fname;
  snprintf(e->library, sizeof e->library, "%s", where);
}

// bytes of [p, p + n) that are not `fill` (a pattern buffer of that byte, `len` long: memcmp
// finds a clean run fast); the first one's offset in *first
static size_t differing(const unsigned char* p, size_t n, const unsigned char* pattern,
                        size_t len, size_t* first) {
  size_t bad = 0;
  for (size_t at = 0; at < n; at += len) {
    size_t k = n - at < len ? n - at : len;
    if (!memcmp(p + at, pattern, k)) continue;
    for (size_t i = 0; i < k; ++i) {
      if (p[at + i] != pattern[0]) {
        if (!bad) *first = at + i;
        ++bad;
      }
    }
  }
  return bad;
}

static void check_pad(const block* b, const char* when) {
  size_t first = 0;
  size_t bad = differing((const unsigned char*)b->p + b->n, PAD, pad_fill, PAD, &first);
  if (bad) {
    record("overflow", b, first, bad, when);
    memset((char*)b->p + b->n, PAD_BYTE, PAD);  // reported once
  }
}

static void check_freed(const block* b, const char* when) {
  size_t first = 0, n = b->n < FILL_LIMIT ? b->n : 0;
  size_t bad = differing(b->p, n, freed_fill, sizeof freed_fill, &first);
  if (bad) {
    record("use-after-free", b, first, bad, when);
    memset(b->p, FREED_BYTE, n);
  }
  check_pad(b, when);
}

// Called under `lock`: only the real free, never a function that may reach a rewritten `free`
// (libstdc++'s operator delete calls `free` through its own GOT, which hz_observe_others
// rewrites: a call from here would take `lock` again).
static void release(block* b) { real_free(b->p); }

static void quarantine_push(block b) {
  if (b.n > FILL_LIMIT) {
    release(&b);
    return;
  }
  memset(b.p, FREED_BYTE, b.n);
  while (q_count && (q_count == QUARANTINE || q_bytes + b.n > QUARANTINE_BYTES)) {
    block* old = &quarantine[q_head];
    check_freed(old, "evicted");
    q_bytes -= old->n;
    release(old);
    q_head = (q_head + 1) % QUARANTINE;
    --q_count;
  }
  quarantine[(q_head + q_count) % QUARANTINE] = b;
  ++q_count;
  q_bytes += b.n;
}

static int quarantined(void* p, block* out) {
  for (size_t i = 0; i < q_count; ++i) {
    block* b = &quarantine[(q_head + i) % QUARANTINE];
    if (b->p == p) {
      *out = *b;
      return 1;
    }
  }
  return 0;
}

static void* zoned_as(void* p, size_t n, void* caller, int object) {
  if (!p) return p;
  memset((char*)p + n, PAD_BYTE, PAD);
  pthread_mutex_lock(&lock);
  add(p, n, caller, object);
  ++n_allocs;
  if (!object && n > max_bytes) max_bytes = n;
  pthread_mutex_unlock(&lock);
  return p;
}

static void* zoned(void* p, size_t n, void* caller) { return zoned_as(p, n, caller, 0); }

// Whether the block p being freed (or reallocated) now is still the block the table knows:
// a block of ours freed behind our back (by code outside the watched libraries) leaves a stale
// entry, and its address may now hold a smaller block of someone else's, which must be neither
// read past its end nor filled. The pointer is live (it is being freed), so asking its usable
// size is safe.
static int still_ours(void* p, const block* b) { return real_usable(p) >= b->n + PAD; }

// 1 if p was handled (ours, or, where `doubles`, a double free of a quarantined block: a scan
// of the quarantine that frees by other libraries, most of them not ours, skip); 0 when the
// caller must free it with its own real function (not ours, or a stale entry's address)
static int release_user(void* p, int doubles) {
  block b, q;
  pthread_mutex_lock(&lock);
  int ours = take(p, &b);
  if (ours && !still_ours(p, &b)) {
    pthread_mutex_unlock(&lock);
    return 0;
  }
  if (ours) {
    ++n_frees;
    check_pad(&b, "at free");
    quarantine_push(b);
  } else if (doubles && quarantined(p, &q)) {
    record("double-free", &q, 0, 0, "at free");
    ours = 1;
  }
  pthread_mutex_unlock(&lock);
  return ours;
}

static size_t size_of(void* p) {  // the block's size if ours, else SIZE_MAX
  size_t n = SIZE_MAX;
  pthread_mutex_lock(&lock);
  if (capacity) {
    size_t j = hash(p) & (capacity - 1);
    while (table[j].p) {
      if (table[j].p == p && table[j].n != SIZE_MAX) {
        if (still_ours(p, &table[j])) n = table[j].n;
        break;
      }
      j = (j + 1) & (capacity - 1);
    }
  }
  pthread_mutex_unlock(&lock);
  return n;
}

// ---- the wrappers ------------------------------------------------------------------------------
#define CALLER __builtin_return_address(0)

static void* hz_malloc(size_t n) { return zoned(real_malloc(n + PAD), n, CALLER); }

static void* hz_calloc(size_t k, size_t n) {
  if (n && k > (SIZE_MAX - PAD) / n) {
    errno = ENOMEM;
    return NULL;
  }
  void* p = zoned(real_malloc(k * n + PAD), k * n, CALLER);
  if (p) memset(p, 0, k * n);
  return p;
}

static void hz_free(void* p) {
  if (p && !release_user(p, 1)) real_free(p);
}

// free in every other library (OBSERVE): one of our blocks is checked and quarantined as at
// its own library's free; anything else goes to the real free
static void hz_foreign_free(void* p) {
  if (p && (!maybe_ours(p) || !release_user(p, 0))) real_free(p);
}

static void* hz_realloc(void* p, size_t n) {
  if (!p) return hz_malloc(n);
  size_t old = size_of(p);
  if (old == SIZE_MAX) return real_realloc(p, n);  // not ours
  if (!n) {
    hz_free(p);
    return NULL;
  }
  void* q = zoned(real_malloc(n + PAD), n, CALLER);
  if (!q) return NULL;
  memcpy(q, p, old < n ? old : n);
  hz_free(p);
  return q;
}

static int hz_posix_memalign(void** out, size_t align, size_t n) {
  int rc = real_posix_memalign(out, align, n + PAD);
  if (!rc) zoned(*out, n, CALLER);
  return rc;
}

static void* hz_aligned_alloc(size_t align, size_t n) {
  size_t total = (n + PAD + align - 1) / align * align;  // C11: a multiple of the alignment
  return zoned(real_aligned_alloc(align, total), n, CALLER);
}

static void* hz_memalign(size_t align, size_t n) {
  return zoned(real_memalign(align, n + PAD), n, CALLER);
}

// operator new/delete (Itanium names), over malloc/free as libstdc++'s are (under ASan they
// are not rewritten: hook_in): new never returns null, so a failure goes to the real operator,
// which throws (the layer is built with -fexceptions)
static void* (*real_new)(size_t);
static void* (*real_new_array)(size_t);
static void* hz_new(size_t n) {
  void* p = real_malloc(n + PAD);
  return p ? zoned_as(p, n, CALLER, 1) : real_new(n);
}
static void* hz_new_array(size_t n) {
  void* p = real_malloc(n + PAD);
  return p ? zoned_as(p, n, CALLER, 1) : real_new_array(n);
}
static void hz_delete(void* p) { hz_free(p); }
static void hz_delete_sized(void* p, size_t n) {
  (void)n;
  hz_free(p);
}

// realloc of one of our blocks by another library: the block leaves our table (its red zone
// checked) and the new one is that library's
static void* hz_foreign_realloc(void* p, size_t n) {
  size_t old = p && maybe_ours(p) ? size_of(p) : SIZE_MAX;
  if (old == SIZE_MAX) return real_realloc(p, n);
  if (!n) {
    hz_foreign_free(p);
    return NULL;
  }
  void* q = real_malloc(n);
  if (!q) return NULL;
  memcpy(q, p, old < n ? old : n);
  hz_foreign_free(p);
  return q;
}

typedef struct {
  const char* name;
  void* hook;
} hook;

static const hook HOOKS[] = {
    {"malloc", (void*)hz_malloc},
    {"calloc", (void*)hz_calloc},
    {"realloc", (void*)hz_realloc},
    {"free", (void*)hz_free},
    {"posix_memalign", (void*)hz_posix_memalign},
    {"aligned_alloc", (void*)hz_aligned_alloc},
    {"memalign", (void*)hz_memalign},
    {"_Znwm", (void*)hz_new},
    {"_Znam", (void*)hz_new_array},
    {"_ZdlPv", (void*)hz_delete},
    {"_ZdaPv", (void*)hz_delete},
    {"_ZdlPvm", (void*)hz_delete_sized},
    {"_ZdaPvm", (void*)hz_delete_sized},
};
// the imports rewritten in every other library: its frees of our blocks are seen (a free of
// anything else goes on to the real free at the cost of one table lookup); operator delete is
// libstdc++'s, whose own `free` import is rewritten like any library's
static const hook OBSERVE[] = {
    {"free", (void*)hz_foreign_free},
    {"realloc", (void*)hz_foreign_realloc},
};

// Under ASan (its runtime in the process) operator new/delete stay ASan's: its own red zones
// cover C++ objects, and a block this layer enlarged would fail its new/delete size checks.
static int objects_hooked = 1;

static void* hook_in(const hook* hooks, size_t n, const char* name) {
  if (!objects_hooked && !strncmp(name, "_Z", 2)) return NULL;
  for (size_t i = 0; i < n; ++i)
    if (!strcmp(hooks[i].name, name)) return hooks[i].hook;
  return NULL;
}

static void before_fork(void) { pthread_mutex_lock(&lock); }
static void after_fork(void) { pthread_mutex_unlock(&lock); }

static int resolve_real(void) {
  if (real_malloc) return 0;
  memset(pad_fill, PAD_BYTE, sizeof pad_fill);
  memset(freed_fill, FREED_BYTE, sizeof freed_fill);
  // a runner forked while another thread allocates must not inherit the lock held
  pthread_atfork(before_fork, after_fork, after_fork);
  // the process's allocator as every other library is bound to it (the loader's symbol
  // lookup, where a preloaded allocator, glibc's malloc checking or ASan, comes first: this
  // library's own references go through its GOT like theirs), so that a block allocated here
  // and freed elsewhere, or the other way round, meets the same allocator. (dlsym(RTLD_DEFAULT)
  // answered libc's own malloc under a preloaded libc_malloc_debug: measured.)
  real_malloc = &malloc;
  real_free = &free;
  real_realloc = &realloc;
  real_posix_memalign = &posix_memalign;
  real_aligned_alloc = &aligned_alloc;
  real_memalign = &memalign;
  real_usable = &malloc_usable_size;
  real_new = dlsym(RTLD_DEFAULT, "_Znwm");
  real_new_array = dlsym(RTLD_DEFAULT, "_Znam");
  objects_hooked = dlsym(RTLD_DEFAULT, "__asan_init") == NULL;
  if (!real_new) real_new = real_malloc;  // no libstdc++ loaded: nothing imports operator new
  if (!real_new_array) real_new_array = real_malloc;
  return real_malloc && real_free && real_realloc && real_posix_memalign ? 0 : -1;
}

#if defined(__x86_64__)
#define R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define R_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define R_GLOB_DAT R_AARCH64_GLOB_DAT
#else
#error "heap_zones: GOT patching supports x86_64 and aarch64"
#endif

typedef struct {
  const char* path;  // the library to patch (its path as the loader has it)
  int patched;       // GOT entries rewritten
  int found;         // the library was loaded
  const hook* hooks;  // which imports, and with what
  size_t n_hooks;
} target;

// Libraries already patched (watched or observed), by load address; only hz_install and
// hz_observe_others touch it, under patch_lock.
#define MAX_SEEN 4096
static uintptr_t seen[MAX_SEEN];
static size_t n_seen;
static pthread_mutex_t patch_lock = PTHREAD_MUTEX_INITIALIZER;

static int was_seen(uintptr_t base) {
  for (size_t i = 0; i < n_seen; ++i)
    if (seen[i] == base) return 1;
  return 0;
}

static void mark_seen(uintptr_t base) {
  if (n_seen < MAX_SEEN && !was_seen(base)) seen[n_seen++] = base;
}

static uintptr_t absolute(uintptr_t base, uintptr_t value) {
  return value < base ? base + value : value;  // the loader relocated most d_ptr values
}

static void patch_relocations(uintptr_t base, const ElfW(Rela) * rel, size_t size,
                              const ElfW(Sym) * symtab, const char* strtab, target* t) {
  long page = sysconf(_SC_PAGESIZE);
  for (size_t i = 0; i < size / sizeof(ElfW(Rela)); ++i) {
    unsigned type = ELF64_R_TYPE(rel[i].r_info);
    if (type != R_JUMP_SLOT && type != R_GLOB_DAT) continue;
    const char* name = strtab + symtab[ELF64_R_SYM(rel[i].r_info)].st_name;
    void* hook = hook_in(t->hooks, t->n_hooks, name);
    if (!hook) continue;
    void** slot = (void**)(base + rel[i].r_offset);
    uintptr_t start = (uintptr_t)slot & ~(uintptr_t)(page - 1);
    if (mprotect((void*)start, (size_t)page, PROT_READ | PROT_WRITE)) continue;
    __atomic_store_n(slot, hook, __ATOMIC_SEQ_CST);
    ++t->patched;
  }
}

static void patch(struct dl_phdr_info* info, target* t) {
  uintptr_t base = info->dlpi_addr;
  const ElfW(Dyn)* dyn = NULL;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = (const ElfW(Dyn)*)(base + info->dlpi_phdr[i].p_vaddr);
  if (!dyn) return;
  const ElfW(Sym)* symtab = NULL;
  const char* strtab = NULL;
  const ElfW(Rela)* jmprel = NULL;
  const ElfW(Rela)* rela = NULL;
  size_t jmprel_size = 0, rela_size = 0;
  for (; dyn->d_tag != DT_NULL; ++dyn) {
    switch (dyn->d_tag) {
      case DT_SYMTAB: symtab = (const ElfW(Sym)*)absolute(base, dyn->d_un.d_ptr); break;
      case DT_STRTAB: strtab = (const char*)absolute(base, dyn->d_un.d_ptr); break;
      case DT_JMPREL: jmprel = (const ElfW(Rela)*)absolute(base, dyn->d_un.d_ptr); break;
      case DT_PLTRELSZ: jmprel_size = dyn->d_un.d_val; break;
      case DT_RELA: rela = (const ElfW(Rela)*)absolute(base, dyn->d_un.d_ptr); break;
      case DT_RELASZ: rela_size = dyn->d_un.d_val; break;
      default: break;
    }
  }
  if (!symtab || !strtab) return;
  if (jmprel) patch_relocations(base, jmprel, jmprel_size, symtab, strtab, t);
  if (rela) patch_relocations(base, rela, rela_size, symtab, strtab, t);
}

static int visit(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  target* t = data;
  if (!info->dlpi_name || strcmp(info->dlpi_name, t->path)) return 0;
  t->found = 1;
  mark_seen(info->dlpi_addr);
  patch(info, t);
  return 1;
}

// Libraries whose frees are not observed: the C library and the loader (their calls to free are
// internal), allocators and sanitizers that define malloc themselves, and this library.
static const char* const NOT_OBSERVED[] = {
    "/libc.so",   "/ld-linux",  "/ld64.so",       "/libc_malloc_debug", "/libasan",
    "/libtsan",   "/liblsan",   "/libhwasan",     "/libmsan",           "/libjemalloc",
    "/libtcmalloc", "/libmimalloc", "linux-vdso", "linux-gate",
};

static int observable(const char* name) {
  Dl_info self;
  if (dladdr((void*)&hz_foreign_realloc, &self) && self.dli_fname && !strcmp(name, self.dli_fname))
    return 0;
  for (size_t i = 0; i < sizeof NOT_OBSERVED / sizeof NOT_OBSERVED[0]; ++i)
    if (strstr(name, NOT_OBSERVED[i])) return 0;
  return 1;
}

static unsigned long long last_adds;  // objects the loader had loaded at the last visit

typedef struct {
  int count;  // libraries newly observed
  int first;  // the visit's first object: is anything loaded since the last visit?
} observing;

static int visit_other(struct dl_phdr_info* info, size_t size, void* data) {
  observing* o = data;
  if (o->first && size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds) {
    if (info->dlpi_adds == last_adds) return 1;  // nothing loaded since: a call per case is cheap
    last_adds = info->dlpi_adds;
  }
  o->first = 0;
  if (was_seen(info->dlpi_addr)) return 0;
  mark_seen(info->dlpi_addr);
  const char* name = info->dlpi_name ? info->dlpi_name : "";
  if (!observable(name)) return 0;  // the main program has the name "": observed
  target t = {name, 0, 1, OBSERVE, sizeof OBSERVE / sizeof OBSERVE[0]};
  patch(info, &t);
  if (t.patched) ++o->count;
  return 0;
}

// ---- the API engine/heap.py calls (ctypes) -----------------------------------------------------

// Rewrite the allocation imports of the library at `path`: the number of GOT entries rewritten,
// -1 if the library is not loaded, -2 if the real functions were not found.
int hz_install(const char* path) {
  if (resolve_real()) return -2;
  target t = {path, 0, 0, HOOKS, sizeof HOOKS / sizeof HOOKS[0]};
  pthread_mutex_lock(&patch_lock);
  dl_iterate_phdr(visit, &t);
  pthread_mutex_unlock(&patch_lock);
  return t.found ? t.patched : -1;
}

// Rewrite the `free`/`realloc` imports of every loaded library not watched nor observed yet
// (call it after hz_install, and again when libraries may have been loaded since): the number of
// libraries newly observed.
int hz_observe_others(void) {
  if (resolve_real()) return -2;
  observing o = {0, 1};
  pthread_mutex_lock(&patch_lock);
  dl_iterate_phdr(visit_other, &o);
  pthread_mutex_unlock(&patch_lock);
  return o.count;
}

// Check every quarantined block's fill and red zone (live blocks are checked at their free: a
// live entry may be stale, its block freed by code outside the watched libraries, its memory
// someone else's by now); the number of errors recorded so far (read them with hz_error_at,
// then hz_clear).
int hz_check(void) {
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < q_count; ++i) check_freed(&quarantine[(q_head + i) % QUARANTINE], "at check");
  int n = n_errors;
  pthread_mutex_unlock(&lock);
  return n;
}

// "kind|size|first|bad|when|library" of error i into buf (0 on success)
int hz_error_at(int i, char* buf, int len) {
  pthread_mutex_lock(&lock);
  int rc = -1;
  if (i >= 0 && i < n_errors) {
    hz_error* e = &errors[i];
    snprintf(buf, (size_t)len, "%s|%zu|%zu|%zu|%s|%s", e->kind, e->size, e->first, e->bad,
             e->when, e->library);
    rc = 0;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

void hz_clear(void) {
  pthread_mutex_lock(&lock);
  n_errors = dropped_errors = 0;
  pthread_mutex_unlock(&lock);
}

// allocations, frees, live blocks, the largest block malloc & co. allocated
void hz_stats(unsigned long long* out) {
  pthread_mutex_lock(&lock);
  out[0] = n_allocs;
  out[1] = n_frees;
  out[2] = live;
  out[3] = max_bytes;
  pthread_mutex_unlock(&lock);
}
