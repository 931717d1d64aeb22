/*
 * zkfence: the lock queue and the lease clock on a ZooKeeper ensemble, for SPIN.
 * What is modelled, what is abstracted away, and how each part maps to the code:
 * see README.md next to this file. Run ./check (it builds in a temp dir).
 *
 * One process (`sys`) owns the whole system; every step is one atomic action
 * (a message delivered and handled, a client's own choice, a fault, or a tick).
 * Time is discrete. All timers are countdowns and all ages are capped, so the
 * state space is finite although time runs forever.
 *
 * Broken variants (each must yield a counterexample):
 *   -DREADS_RENEW             the first clock: every answer renews from its send
 *                             time (reads too), margin T/10, reads suppress the
 *                             keepalive.
 *   -DFAST_GRANT_NO_OWN_CHECK the fast grant without the exists watch on our
 *                             own node.
 *   -DGRANT_NO_CLOCK_CHECK    a waiter is granted without asking its clock
 *                             (etcd issue 11456).
 *   -DSYNC_PROVES_QUORUM      the clock of issue 10: an answered sync is a proof
 *                             (t* + T - slack), the keepalive and the grant's
 *                             confirm are syncs. A deposed leader answers syncs.
 *   -DTOUCH_AT_SEND           a touch counts as reported by its send time, not by
 *                             the arrival of its answer. A held request reaches
 *                             the server after later ones were sent.
 */

/* ---------------------------------------------------------------- bounds */
#define T      20       /* negotiated session timeout, in ticks            */
#define TICK   10       /* server tickTime: T = 2 tickTime (ZooKeeper's    */
                        /* minimum), the worst case for the report lag     */
                        /* and for the deposed leader's window             */
#define PING   (TICK/2) /* a follower reports its touches every tickTime/2 */
#define SLACK  1        /* lease_margin: the code's default T/20           */
#define RL     (T/4 + SLACK) /* report_lag                                 */
#define VAL    (T - SLACK)   /* valid_until = t* + VAL                     */
#define VALOLD (T - 2)       /* first rule: send + T - ceil(T/10)          */
#define KA     3        /* keepalive interval: the code's T/6 (3.33 ticks) */
#define FDROP  (2*TICK) /* syncLimit (2) x tickTime: a cut-off follower    */
                        /* answers reads this long, then drops clients;    */
                        /* the earliest a new leader can start after the   */
                        /* old one's last packet                           */
#define DWIN   TICK     /* a deposed leader serves up to tickTime after    */
                        /* the new leader's start                          */
#define PMAX   (T+1)    /* longest client pause                            */
#define CLMAX  (T+1)    /* longest client<->server blackhole               */
#define PINMAX (T+1)    /* a deposed leader's client that lists only that  */
                        /* server reconnects when it serves again          */
#define HMAX   (RL+2)   /* longest a request is held in the client before  */
                        /* it reaches the server (< connection timeout)    */
#ifndef NF
#define NF     1        /* faults per run (each kind at most once)         */
#endif
#ifndef FAULTS
#define FAULTS 1023     /* which fault kinds may happen (bits below)       */
#endif
#ifndef K
#define K      2        /* grants per client                               */
#endif
#define AMAX   VAL      /* ages are capped here: an age >= VAL renews      */
                        /* nothing (and neither does one >= VAL - vu)      */

/* ---------------------------------------------------------------- names */
#define NOC 0           /* client connection: none                         */
#define SL  1           /* ... to the leader (the new one after a cut)     */
#define SF  2           /* ... to the follower                             */
#define SX  3           /* ... closed by the server, Expired pending       */
#define SD  4           /* ... to the deposed leader (cut from its peers)  */

#define UP   0          /* follower: following the leader                  */
#define CUT  1          /* ... link to the leader lost, not yet noticed    */
#define DOWN 2          /* ... not serving (crashed, or dropped clients)   */

/* client states (queue/mod.rs; HOLDING..LOSTDEL: lease.rs) */
#define IDLE       0
#define CREATING   1    /* enqueue: ephemeral sequential create in flight  */
#define LISTING    2    /* position: getChildren in flight                 */
#define WATCHING   3    /* exists(pred)+exists(own) with watches in flight */
#define WAITING    4    /* watches set, waiting for an event               */
#define CONFIRMING 5    /* check-only multi on our node in flight          */
#define CONFWAIT   6    /* confirm left the clock lapsed: again next tick  */
#define RECOVER    7    /* after a reconnect: sync + list (find our node)  */
#define HOLDING    8
#define DELETING   9    /* release, or cleanup of a Lost lease             */
#define LOSTDEL    10   /* Lost; delete our node when connected            */
#define DEAD       11
#define DONE       12   /* no grants left, no node: its session closed     */

/* requests, client -> server (and forwarded follower -> leader) */
#define Q_CONN    1     /* a = 1: new session                              */
#define Q_SYNC    2     /* keepalive of -DSYNC_PROVES_QUORUM               */
#define Q_CREATE  3
#define Q_DELETE  4     /* a = czxid of the node                           */
#define Q_LIST    5
#define Q_WATCH   6     /* a = czxid of the predecessor                    */
#define Q_CONFIRM 7     /* check-only multi on our node (a write);         */
                        /* sync + exists with -DSYNC_PROVES_QUORUM         */
#define Q_RECOVER 8     /* sync + getChildren                              */
#define Q_READ    9     /* a status read (contenders())                    */
#define Q_KAW     10    /* keepalive: check-only multi (a write)           */
#define Q_KAR     11    /* keepalive: a read (no queue node)               */
/* answers and events, server -> client: {type, a, b} */
#define R_CONN    12    /* a = ok                                          */
#define R_KA      13    /* a keepalive's answer: a = its kind (A_*)        */
#define R_CREATE  14    /* a = czxid                                       */
#define R_DELETE  15
#define R_LIST    16    /* a = our node's czxid (0: none), b = predecessor */
#define R_WATCH   17    /* a = predecessor exists, b = our node exists     */
#define R_CONFIRM 18    /* a = our node's czxid                            */
#define R_RECOVER 19    /* as R_LIST                                       */
#define R_READ    20
#define E_PRED    21    /* NodeDeleted(pred): a = czxid, b = ghost: ours   */
                        /* existed at that zxid                            */
#define E_OWN     22    /* NodeDeleted(ours): a = czxid                    */
#define R_EXPIRED 23
/* follower -> leader: forwarded Q_* {Q, c, a}, or a report {F_REPORT, 0, mask} */
#define F_REPORT  30
/* leader -> follower: commits, or answers {Q, c, a} to forwarded requests */
#define L_CREATE  31    /* {L_CREATE, c, czxid}                            */
#define L_DELETE  32
#define L_EXPIRE  33    /* session c closed                                */

/* what an answer is to the clock (ops.rs: Answer::{Read, Committed, Synced}) */
#define A_READ   0
#define A_COMMIT 1
#define A_SYNC   2

/* ---------------------------------------------------------------- state */
chan creq[2]  = [6] of { byte, byte };
chan cresp[2] = [8] of { byte, byte, byte };
chan fl = [8] of { byte, byte, byte };
chan lf = [8] of { byte, byte, byte };

/* ensemble */
byte z[6];              /* czxid of client c's node on server s: z[ZI(s,c)] */
byte zx;                /* last zxid (creates only: tokens)                 */
bool salive[2];         /* session alive at the leader                      */
byte lexp[2];           /* leader: ticks until it expires the session       */
byte fst;               /* follower state                                   */
byte fcut;              /* ticks until a cut-off follower drops its clients */
byte fping;             /* ticks until the follower's next report           */
byte ftouch;            /* sessions touched at the follower since a report  */
byte wp[2];             /* server-side watch: czxid of the watched pred     */
byte wo[2];             /* server-side watch: czxid of our own node         */
byte dt;                /* leader cut from its peers: ticks until the       */
                        /* deposed leader steps down at the latest (0: no   */
                        /* deposed leader). The new leader starts when it   */
                        /* reaches DWIN.                                    */
byte dal;               /* sessions alive at the deposed leader (bits)      */

/* clients */
byte cs[2];             /* state                                            */
byte conn[2];
bool hs[2];             /* handshake in flight                              */
bool ns[2];             /* next connect asks for a new session              */
byte ca[2];             /* age of the connect request                       */
byte oa[2];             /* age of the queue operation in flight             */
byte opc[2];            /* ... the valid_until it proves (ticks from now)   */
byte kq[2];             /* keepalives in flight                             */
byte kign[2];           /* ... of which abandoned (answers ignored)         */
byte ka[2];             /* age of the newest keepalive                      */
byte kpc[2];            /* ... the valid_until it proves                    */
byte kat[2];            /* ticks until the next keepalive                   */
bool rq[2];             /* status read in flight                            */
byte ra[2];             /* its age                                          */
bool rl[2];             /* the holder runs a status loop (a read a tick)    */
byte vu[2];             /* lease clock: ticks until valid_until (0: lapsed) */
byte mv[2];             /* the valid_until a proof sent now would give:     */
                        /* the latest touch answered >= RL ticks ago        */
byte pd[2*RL];          /* touches answered j < RL ticks ago: pd[c*RL + j]  */
                        /* = the valid_until each would give (0: none)      */
int  tm[2];             /* -DTOUCH_AT_SEND: bit k = a touch sent k ago      */
byte tok[2];            /* czxid of our node (the fencing token)            */
byte pr[2];             /* czxid of the predecessor we watch                */
byte gl[2];             /* grants left                                      */
byte pa[2];             /* pause: ticks left                                */
byte lc[2];             /* link blackhole: ticks left                       */
byte hq[2];             /* requests held in the client: ticks left          */
byte pin[2];            /* dropped by the deposed leader, it reaches no     */
                        /* other server yet: ticks left at most             */

/* faults and ghosts */
byte nf = NF;           /* faults left                                      */
short faults = FAULTS;  /* fault kinds allowed (bits); ./check sets NF,     */
                        /* FAULTS and K at run time (ZKF_NF, ZKF_FAULTS,    */
                        /* ZKF_K) so that one build serves every sound run  */
short used;             /* bit per fault kind already used                  */
byte dd;                /* 0, or 1 + the client that died                   */
bool adm[2];            /* an operator deleted c's node (no promise then)   */
byte lasttok;           /* token of the last grant                          */

/* scratch: always 0 between steps (plain, not hidden, so that BFS works) */
byte m1, m2, m3, n, k, s, o, x, w1, w2, r, dz, q1, q2, qk;

#define ZI(sv,c)   ((sv) == SD -> 4 + (c) : ((sv)-1)*2 + (c))
#define OTHER(c)   (1 - (c))
#define LIVE(c)    (cs[c] < DEAD)
#define ONLINE(c)  (conn[c] == SL || conn[c] == SF || conn[c] == SD)
#define CONNECTED(c) (ONLINE(c) && !hs[c])
#define BEL(c)     (cs[c] == HOLDING && !adm[c])
#define CTD(c)     (cs[c] >= CREATING && cs[c] <= RECOVER)
#define OPF(c)     ((cs[c] == CREATING || cs[c] == LISTING || cs[c] == WATCHING || \
                     cs[c] == CONFIRMING || cs[c] == RECOVER || cs[c] == DELETING) && CONNECTED(c))
#define LEADER     (dt <= DWIN)   /* a leader with a quorum serves         */
#define DEPOSED    (dt > 0)       /* the old leader still serves its clients */

/* deliverable, non-empty channels: time may not pass while one exists
   (unless a tick of delay is spent): the fairness of the model */
#define DQ(c) (len(creq[c]) > 0 && ONLINE(c) && lc[c] == 0 && hq[c] == 0)
#define DR(c) (len(cresp[c]) > 0 && LIVE(c) && pa[c] == 0 && lc[c] == 0)
#define DFL   (len(fl) > 0 && fst == UP)
#define DLF   (len(lf) > 0 && fst == UP)
#define BUSY  (DQ(0) || DQ(1) || DR(0) || DR(1) || DFL || DLF)
#ifdef ANYWHERE
#define QUIET true
#else
#define QUIET (!BUSY)  /* choices and faults between deliveries only */
#endif

/* fault kinds, each at most once per run, NF in all */
#define F_FCUT  1
#define F_FCR   2
#define F_LCR   4
#define F_LINK  8
#define F_PAUSE 16
#define F_ADMIN 32
#define F_DEATH 64
#define F_DELAY 128
#define F_LCUT  256     /* the leader cut from its peers, not its clients  */
#define F_HOLD  512     /* a client's requests held before the server      */
#define FAULT(bit) (nf > 0 && (used & (bit)) == 0 && (faults & (bit)) != 0)
#define SPEND(bit) nf--; used = used | (bit)

/* ------------------------------------------ what proves what (ops.rs, clock.rs) */
#ifdef SYNC_PROVES_QUORUM
#define ISPROOF(kind) ((kind) != A_READ)
#define PROOFQ(t)     ((t) == Q_CREATE || (t) == Q_DELETE || (t) == Q_CONFIRM || (t) == Q_RECOVER)
#define KAQ(c)        Q_SYNC
#define CONFIRM_KIND  A_SYNC
#else
#define ISPROOF(kind) ((kind) == A_COMMIT)
#define PROOFQ(t)     ((t) == Q_CREATE || (t) == Q_DELETE || (t) == Q_CONFIRM)
#define KAQ(c)        (tok[c] != 0 -> Q_KAW : Q_KAR)  /* a committed keepalive */
                                                    /* while we have a node  */
#define CONFIRM_KIND  A_COMMIT
#endif

/* ---------------------------------------------------------------- helpers */
/* During a blackhole (lc > 0) nothing reaches the other side, and the
   connection is then torn down (which empties both channels), so a message
   sent into it is dropped at once: the same behaviour, fewer states. */
inline csend(c, t, a) { if :: lc[c] == 0 -> assert(nfull(creq[c])); creq[c]!t,a :: else -> skip fi }
inline rsend(c, t, a, b) { if :: lc[c] == 0 -> assert(nfull(cresp[c])); cresp[c]!t,a,b :: else -> skip fi }
inline flsend(t, c, a) { assert(nfull(fl)); fl!t,c,a }
inline lfsend(t, c, a) { assert(nfull(lf)); lf!t,c,a }
inline age(v) { if :: v < AMAX -> v++ :: else -> skip fi }
inline down(v) { if :: v > 0 -> v-- :: else -> skip fi }

/* Drop client c's forwarded requests and their answers (its connection closed). */
inline purge(c) {
  n = len(fl);
  do
  :: n > 0 -> fl?m1,m2,m3;
     if :: m1 == F_REPORT || m2 != c -> fl!m1,m2,m3 :: else -> skip fi; n--
  :: else -> break
  od;
  n = len(lf);
  do
  :: n > 0 -> lf?m1,m2,m3;
     if :: m1 >= L_CREATE || m2 != c -> lf!m1,m2,m3 :: else -> skip fi; n--
  :: else -> break
  od;
  m1 = 0; m2 = 0; m3 = 0
}

inline flush(ch) { do :: nempty(ch) -> ch?_,_,_ :: empty(ch) -> break od }
inline flush2(ch) { do :: nempty(ch) -> ch?_,_ :: empty(ch) -> break od }

/* Ghost bookkeeping, no behaviour: server sv dropped client c's request t (a
   write or a new session at the deposed leader, anything at a cut-off
   follower), so no answer will ever come. The age and the proof the client
   keeps for it can then never be used: they are fixed, so that their
   counting does not multiply the states. A keepalive is the live one if no
   other keepalive is queued behind it. */
inline lost(c, t) {
  if
  :: PROOFQ(t) || t == Q_LIST || t == Q_WATCH -> oa[c] = AMAX; opc[c] = 0
  :: t == Q_CONN -> ca[c] = AMAX
  :: t == Q_KAW || t == Q_KAR || t == Q_SYNC ->
     n = len(creq[c]); x = 1;
     do
     :: n > 0 -> creq[c]?w1,w2;
        if :: w1 == Q_KAW || w1 == Q_KAR || w1 == Q_SYNC -> x = 0 :: else -> skip fi;
        creq[c]!w1,w2; n--
     :: else -> break
     od;
     if :: x && kq[c] > kign[c] -> ka[c] = AMAX; kpc[c] = 0 :: else -> skip fi;
     x = 0; w1 = 0; w2 = 0
  :: else -> skip
  fi
}

/* The connection of client c ends (the client sees it at once). */
inline disconnect(c) {
  flush2(creq[c]); flush(cresp[c]); purge(c);
  conn[c] = NOC; hs[c] = 0; wp[c] = 0; wo[c] = 0; kq[c] = 0; kign[c] = 0; rq[c] = 0;
  hq[c] = 0; kpc[c] = 0
}

/* The server closes an expired session's connection. */
inline close_expired(c) {
  flush2(creq[c]); flush(cresp[c]); purge(c);
  wp[c] = 0; wo[c] = 0; conn[c] = SX; hq[c] = 0;
  rsend(c, R_EXPIRED, 0, 0)
}

inline drop_clients(sv) {
  if :: conn[0] == sv -> disconnect(0) :: else -> skip fi;
  if :: conn[1] == sv -> disconnect(1) :: else -> skip fi
}

#define OWNOK(sv,c) (tok[c] != 0 && z[ZI(sv,c)] == tok[c])

/* Server sv applies the delete of client c's node zz: watches fire, in zxid order. */
inline apply_delete(sv, c, zz) {
  if :: z[ZI(sv,c)] == zz -> z[ZI(sv,c)] = 0 :: else -> skip fi;
  if :: conn[0] == sv && zz != 0 && wp[0] == zz -> wp[0] = 0; rsend(0, E_PRED, zz, OWNOK(sv,0)) :: else -> skip fi;
  if :: conn[1] == sv && zz != 0 && wp[1] == zz -> wp[1] = 0; rsend(1, E_PRED, zz, OWNOK(sv,1)) :: else -> skip fi;
  if :: conn[c] == sv && zz != 0 && wo[c] == zz -> wo[c] = 0; rsend(c, E_OWN, zz, 0) :: else -> skip fi
}

inline l_delete(c, zz) {
  apply_delete(SL, c, zz);
  if :: fst == UP -> lfsend(L_DELETE, c, zz) :: else -> skip fi
}

inline l_create(c) {
  assert(z[ZI(SL,c)] == 0);     /* one node per client: see README */
  zx++; z[ZI(SL,c)] = zx; adm[c] = 0;
  if :: fst == UP -> lfsend(L_CREATE, c, zx) :: else -> skip fi
}

inline expire(c) {
  salive[c] = 0;
  if :: z[ZI(SL,c)] != 0 -> dz = z[ZI(SL,c)]; l_delete(c, dz); dz = 0 :: else -> skip fi;
  if :: conn[c] == SL -> close_expired(c) :: else -> skip fi;
  if :: fst == UP -> lfsend(L_EXPIRE, c, 0) :: else -> skip fi
}

/* The listing of server sv for client c: x = our node, k = predecessor. */
inline listing(sv, c) {
  o = OTHER(c); x = z[ZI(sv,c)];
  if :: x != 0 && z[ZI(sv,o)] != 0 && z[ZI(sv,o)] < x -> k = z[ZI(sv,o)] :: else -> k = 0 fi
}

/* A read answered by server sv (the leader for its own clients, the
   follower from its own tree, even when cut off, the deposed leader from
   its own tree). */
inline read(sv, c, t, a) {
  if
  :: t == Q_LIST || t == Q_RECOVER ->
     listing(sv, c); rsend(c, (t == Q_LIST -> R_LIST : R_RECOVER), x, k); x = 0; k = 0
  :: t == Q_CONFIRM -> rsend(c, R_CONFIRM, z[ZI(sv,c)], 0)   /* sync + exists */
  :: t == Q_WATCH ->
     o = OTHER(c);
     if :: a != 0 && z[ZI(sv,o)] == a -> wp[c] = a; w1 = 1 :: else -> w1 = 0 fi;
#ifdef FAST_GRANT_NO_OWN_CHECK
     w2 = 1;                    /* the old code set no watch on its own node */
#else
     if :: OWNOK(sv,c) -> wo[c] = tok[c]; w2 = 1 :: else -> w2 = 0 fi;
#endif
     rsend(c, R_WATCH, w1, w2); w1 = 0; w2 = 0
  :: t == Q_READ -> rsend(c, R_READ, 0, 0)
  :: t == Q_KAR -> rsend(c, R_KA, A_READ, 0)
  fi;
  o = 0
}

/* The leader handles a request of client c, received directly (fw = 0) or
   forwarded by the follower (fw = 1; answers go back on lf). */
inline l_handle(c, t, a, fw) {
  if
  :: t == Q_CONN ->
     if :: a -> salive[c] = 1; lexp[c] = T; r = 1
        :: !a && salive[c] -> lexp[c] = T; r = 1
        :: else -> r = 0
     fi;
     if :: fw -> lfsend(Q_CONN, c, r) :: else -> rsend(c, R_CONN, r, 0) fi; r = 0
  :: t != Q_CONN && !salive[c] -> skip   /* its connection is being closed */
  :: t != Q_CONN && salive[c] ->
     if :: !fw -> lexp[c] = T :: else -> skip fi;  /* forwarded: no touch */
     if
     :: t == Q_SYNC -> if :: fw -> lfsend(Q_SYNC, c, 0) :: else -> rsend(c, R_KA, A_SYNC, 0) fi
     :: t == Q_KAW ->               /* committed, also as an error (NoNode) */
        if :: fw -> lfsend(Q_KAW, c, 0) :: else -> rsend(c, R_KA, A_COMMIT, 0) fi
     :: t == Q_CREATE ->
        l_create(c);
        if :: fw -> lfsend(Q_CREATE, c, z[ZI(SL,c)]) :: else -> rsend(c, R_CREATE, z[ZI(SL,c)], 0) fi
     :: t == Q_DELETE ->            /* committed, also as an error (NoNode) */
        if :: a != 0 && z[ZI(SL,c)] == a -> l_delete(c, a) :: else -> skip fi;
        if :: fw -> lfsend(Q_DELETE, c, 0) :: else -> rsend(c, R_DELETE, 0, 0) fi
     :: t == Q_CONFIRM ->
#ifdef SYNC_PROVES_QUORUM
        /* sync, then exists: answered by whoever the client is connected to */
        if :: fw -> lfsend(t, c, 0) :: else -> read(SL, c, t, a) fi
#else
        /* a check-only multi on our node: the leader orders it; NoNode (our
           node is gone) is an error transaction, committed too */
        if :: fw -> lfsend(t, c, z[ZI(SL,c)]) :: else -> rsend(c, R_CONFIRM, z[ZI(SL,c)], 0) fi
#endif
     :: t == Q_RECOVER ->
        /* sync, then the read: answered by whoever the client is connected to */
        if :: fw -> lfsend(t, c, 0) :: else -> read(SL, c, t, a) fi
     :: t == Q_LIST || t == Q_WATCH || t == Q_READ || t == Q_KAR -> assert(!fw); read(SL, c, t, a)
     fi
  fi
}

/* The deposed leader (cut from its peers, not yet aware) handles a request of
   client c. It still believes it leads: it answers syncs at once (no quorum
   round) and reads from its own tree, revalidates sessions it knows, and
   never commits anything, so writes and new sessions are never answered. */
inline d_handle(c) {
  creq[c]?m1,m2;
  if
  :: m1 == Q_CONN && !m2 -> rsend(c, R_CONN, (dal >> c) & 1, 0)
  :: m1 == Q_SYNC -> rsend(c, R_KA, A_SYNC, 0)
  :: m1 == Q_LIST || m1 == Q_WATCH || m1 == Q_READ || m1 == Q_KAR || m1 == Q_RECOVER ->
     read(SD, c, m1, m2)
#ifdef SYNC_PROVES_QUORUM
  :: m1 == Q_CONFIRM -> read(SD, c, m1, m2)   /* sync + exists */
#endif
  :: else -> lost(c, m1)         /* a write, or a new session: no quorum */
  fi;
  m1 = 0; m2 = 0
}

/* ------------------------------------------------- the lease clock (clock.rs) */
/* Values vu, mv, pd, kpc and opc are "ticks from now", so they all count down
   together. One that is <= vu can never move the clock again (vu only grows
   apart from counting down), and neither can an age >= VAL - vu: both are
   dropped, which keeps the state space small and changes nothing. */
inline prune(c) {
  q1 = VAL - vu[c];
  if :: oa[c] >= q1 -> oa[c] = AMAX :: else -> skip fi;
  if :: ka[c] >= q1 && kq[c] > 0 -> ka[c] = AMAX :: else -> skip fi;
  if :: ca[c] >= q1 && hs[c] -> ca[c] = AMAX :: else -> skip fi;
  if :: ra[c] >= q1 && rq[c] -> ra[c] = AMAX :: else -> skip fi;
#ifdef TOUCH_AT_SEND
  tm[c] = tm[c] & ((1 << q1) - 1);
#endif
  if :: mv[c] <= vu[c] -> mv[c] = 0 :: else -> skip fi;
  if :: kpc[c] <= vu[c] -> kpc[c] = 0 :: else -> skip fi;
  if :: opc[c] <= vu[c] -> opc[c] = 0 :: else -> skip fi;
  /* a pending touch answered later than another that gives at least as much
     is of no use: keep a chain rising from the oldest answer to the newest */
  q2 = (mv[c] > vu[c] -> mv[c] : vu[c]); qk = RL;
  do
  :: qk > 0 -> qk--;
     if :: pd[c*RL + qk] <= q2 -> pd[c*RL + qk] = 0 :: else -> q2 = pd[c*RL + qk] fi
  :: else -> break
  od;
  q1 = 0; q2 = 0; qk = 0
}

inline renew(c, v) { if :: v > vu[c] -> vu[c] = v :: else -> skip fi }

#ifdef TOUCH_AT_SEND
/* The rule of issue 10: a touch is its send time; a proof sent ag ticks ago
   vouches for the latest answered touch sent at least RL ticks before it. */
inline touch(c, ag) { if :: ag < AMAX -> tm[c] = tm[c] | (1 << ag) :: else -> skip fi }
inline proof(c, ag, pc) {
  k = ag + RL;
  do
  :: k < AMAX && ((tm[c] >> k) & 1) -> renew(c, VAL - k); break
  :: k < AMAX && !((tm[c] >> k) & 1) -> k++
  :: k >= AMAX -> break
  od;
  k = 0
}
#else
/* The rule: a touch counts from its answer's arrival. A touch whose answer
   arrived now goes to pd[c*RL]; RL ticks later it is in mv. A proof sent
   now vouches for t* = the send time of the latest touch whose answer arrived
   at least RL ticks ago, i.e. for mv at its send (carried as kpc / opc). */
inline touch(c, ag) {
  if :: ag < VAL && VAL - ag > pd[c*RL] -> pd[c*RL] = VAL - ag :: else -> skip fi
}
inline proof(c, ag, pc) { renew(c, pc) }
#endif

/* ops.rs: every answer is a touch; what it proves depends on its kind. */
inline answered(c, kind, ag, pc) {
#ifdef READS_RENEW
  if :: ag < VALOLD -> renew(c, VALOLD - ag) :: else -> skip fi; kat[c] = KA;
#else
  touch(c, ag);
  if :: ISPROOF(kind) -> proof(c, ag, pc) :: else -> skip fi;
#endif
  prune(c)
}

/* The session's creation: the connect's send time is a proven touch. */
inline answered_connect(c, ag) {
  if :: ag < VAL -> renew(c, VAL - ag) :: else -> skip fi;
  prune(c)
}

/* Send a request of the queue (or the lease); a proof carries what it vouches for. */
inline opsend(c, t, a, st) {
  csend(c, t, a); oa[c] = 0; cs[c] = st;
  if :: PROOFQ(t) -> opc[c] = mv[c] :: else -> opc[c] = 0 fi
}

inline ka_send(c) { csend(c, KAQ(c), 0); ka[c] = 0; kpc[c] = mv[c]; kat[c] = KA }

/* -------------------------------------------- grants (queue/mod.rs, admission.rs) */
inline grant(c, ok) {
  assert(ok);                   /* (3) a grant only on an existing node     */
  assert(adm[c] || !BEL(OTHER(c))); /* (2) the old holder's Lost came first */
  assert(adm[c] || tok[c] > lasttok); /* (4) tokens of successive grants increase */
  if :: !adm[c] -> lasttok = tok[c] :: else -> skip fi;
  cs[c] = HOLDING; gl[c]--;
  if :: rl[c] = 0 :: rl[c] = 1 fi   /* this holder runs a status loop, or not */
}

inline try_grant(c, ok) {
#ifdef GRANT_NO_CLOCK_CHECK
  grant(c, ok)
#else
  if
  :: vu[c] > 0 -> grant(c, ok)
  :: else -> opsend(c, Q_CONFIRM, 0, CONFIRMING)
  fi
#endif
}

inline enqueue(c) { opsend(c, Q_CREATE, 0, CREATING) }

/* A listing answer (plain, or after a reconnect) at client c. */
inline position(c, own, pred) {
  if
  :: own == 0 -> enqueue(c)              /* our node is gone: enqueue again */
  :: own != 0 && pred == 0 -> try_grant(c, 1)
  :: own != 0 && pred != 0 -> pr[c] = pred; opsend(c, Q_WATCH, pred, WATCHING)
  fi
}

inline session_lost(c) {
  vu[c] = 0; tm[c] = 0; mv[c] = 0; kpc[c] = 0; opc[c] = 0;
  qk = 0; do :: qk < RL -> pd[c*RL + qk] = 0; qk++ :: else -> break od; qk = 0;
  ns[c] = 1; hs[c] = 0; kq[c] = 0; kign[c] = 0; rq[c] = 0;
  if
  :: cs[c] == HOLDING || cs[c] == LOSTDEL || cs[c] == DELETING -> cs[c] = IDLE; tok[c] = 0
  :: else -> skip                        /* contending: recover after connect */
  fi
}

/* Client c handles one answer or event. */
inline client_recv(c) {
  cresp[c]?m1,m2,m3;
  if
  :: m1 == R_CONN && m2 ->
     /* only the session's creation vouches (LeaseClock::new); a reconnect
        sends a keepalive at once */
     hs[c] = 0; if :: ns[c] -> answered_connect(c, ca[c]) :: else -> skip fi; ns[c] = 0;
     ka_send(c); kq[c] = 1;
     if
     :: CTD(c) -> opsend(c, Q_RECOVER, 0, RECOVER)
     :: cs[c] == DELETING || cs[c] == LOSTDEL -> opsend(c, Q_DELETE, tok[c], DELETING)
     :: else -> skip
     fi
  :: m1 == R_CONN && !m2 -> session_lost(c); disconnect(c)
  :: m1 == R_EXPIRED -> session_lost(c); conn[c] = NOC
  :: m1 == R_KA ->
     if
     :: kign[c] > 0 -> kign[c]--; kq[c]--   /* abandoned keepalive */
     :: kign[c] == 0 && kq[c] > 0 -> kq[c]--; answered(c, m2, ka[c], kpc[c]); kpc[c] = 0
     :: else -> assert(false)
     fi
  :: m1 == R_READ -> rq[c] = 0; answered(c, A_READ, ra[c], 0)
  :: m1 == R_CREATE ->
     assert(cs[c] == CREATING); answered(c, A_COMMIT, oa[c], opc[c]);
     tok[c] = m2; opsend(c, Q_LIST, 0, LISTING)
  :: m1 == R_LIST ->
     assert(cs[c] == LISTING); answered(c, A_READ, oa[c], 0);
     assert(m2 == 0 || m2 == tok[c]);
     position(c, m2, m3)
  :: m1 == R_RECOVER ->
     assert(cs[c] == RECOVER); answered(c, A_SYNC, oa[c], opc[c]);
     tok[c] = m2;                        /* protected create: adopt our node */
     position(c, m2, m3)
  :: m1 == R_WATCH ->
     assert(cs[c] == WATCHING); answered(c, A_READ, oa[c], 0);
     if
     :: !m3 -> enqueue(c)
     :: m3 && !m2 -> opsend(c, Q_LIST, 0, LISTING)
     :: m3 && m2 -> cs[c] = WAITING; opc[c] = 0
     fi
  :: m1 == R_CONFIRM ->
     assert(cs[c] == CONFIRMING); answered(c, CONFIRM_KIND, oa[c], opc[c]);
     if
     :: m2 == 0 || m2 != tok[c] -> enqueue(c)
     :: m2 != 0 && m2 == tok[c] && vu[c] > 0 -> grant(c, 1); opc[c] = 0
     :: m2 != 0 && m2 == tok[c] && vu[c] == 0 -> cs[c] = CONFWAIT; opc[c] = 0
     fi
  :: m1 == R_DELETE ->
     assert(cs[c] == DELETING); answered(c, A_COMMIT, oa[c], opc[c]);
     cs[c] = IDLE; tok[c] = 0; opc[c] = 0
  :: m1 == E_PRED ->
     /* the predecessor we watched was the head of our last listing (with two
        contenders it always is): we hold without listing again, unless the
        event for our own node came first (then we left WAITING already) */
     if :: cs[c] == WAITING && m2 == pr[c] -> try_grant(c, m3) :: else -> skip fi
  :: m1 == E_OWN && m2 == tok[c] ->
     if
#ifndef FAST_GRANT_NO_OWN_CHECK
     :: cs[c] == WAITING || cs[c] == CONFWAIT -> enqueue(c)
#endif
     :: cs[c] == HOLDING -> cs[c] = IDLE; tok[c] = 0   /* Lost: node deleted */
     :: else -> skip
     fi
  :: m1 == E_OWN && m2 != tok[c] -> skip  /* a stale watch */
  :: else -> assert(false)
  fi;
  m1 = 0; m2 = 0; m3 = 0
}

/* The follower handles a request of client c. */
inline f_handle(c) {
  creq[c]?m1,m2;
  ftouch = ftouch | (1 << c);
  if
  :: m1 == Q_LIST || m1 == Q_WATCH || m1 == Q_READ || m1 == Q_KAR -> read(SF, c, m1, m2)
  :: else -> if :: fst == UP -> flsend(m1, c, m2) :: else -> lost(c, m1) fi  /* cut: lost */
  fi;
  m1 = 0; m2 = 0
}

/* The follower handles a commit or an answer from the leader. */
inline f_from_leader() {
  lf?m1,s,dz;                   /* s: the client, dz: the argument */
  if
  :: m1 == L_CREATE -> z[ZI(SF,s)] = dz
  :: m1 == L_DELETE -> apply_delete(SF, s, dz)
  :: m1 == L_EXPIRE -> if :: conn[s] == SF -> close_expired(s) :: else -> skip fi
  :: m1 < L_CREATE && conn[s] != SF -> skip
  :: m1 < L_CREATE && conn[s] == SF ->
     if
     :: m1 == Q_CONN -> rsend(s, R_CONN, dz, 0)
     :: m1 == Q_SYNC -> rsend(s, R_KA, A_SYNC, 0)
     :: m1 == Q_KAW -> rsend(s, R_KA, A_COMMIT, 0)
     :: m1 == Q_CREATE -> rsend(s, R_CREATE, dz, 0)
     :: m1 == Q_DELETE -> rsend(s, R_DELETE, 0, 0)
#ifdef SYNC_PROVES_QUORUM
     :: m1 == Q_CONFIRM -> read(SF, s, m1, 0)
#else
     :: m1 == Q_CONFIRM -> rsend(s, R_CONFIRM, dz, 0)   /* the leader's answer */
#endif
     :: m1 == Q_RECOVER -> read(SF, s, m1, 0)
     fi
  fi;
  m1 = 0; s = 0; dz = 0
}

inline l_from_follower() {
  fl?m1,m2,m3;
  if
  :: m1 == F_REPORT ->
     if :: (m3 & 1) && salive[0] -> lexp[0] = T :: else -> skip fi;
     if :: (m3 & 2) && salive[1] -> lexp[1] = T :: else -> skip fi
  :: else -> s = m2; l_handle(s, m1, m3, 1); s = 0
  fi;
  m1 = 0; m2 = 0; m3 = 0
}

/* The deposed leader steps down and drops its clients. A client that lists
   only that server (as in issue 25's trials) reaches the ensemble again only
   when it serves again, as a follower of the new leader. Reduction: either at
   once or PINMAX ticks later, nothing in between (see README). */
inline step_down() {
  if :: conn[0] == SD -> disconnect(0); if :: pin[0] = PINMAX :: skip fi :: else -> skip fi;
  if :: conn[1] == SD -> disconnect(1); if :: pin[1] = PINMAX :: skip fi :: else -> skip fi;
  dt = 0
}

/* ---------------------------------------------------------------- a tick */
/* A client with no grants left and no node closes its session. Nothing it
   does afterwards can matter to the other client (it has no node in the
   queue), so it stops: its timers and clock no longer multiply the states. */
inline finish(c) {
  disconnect(c); cs[c] = DONE; salive[c] = 0; lexp[c] = 0; ns[c] = 0;
  vu[c] = 0; tm[c] = 0; mv[c] = 0; opc[c] = 0; oa[c] = 0; ka[c] = 0; ca[c] = 0; ra[c] = 0;
  kat[c] = 0; pa[c] = 0; lc[c] = 0; pr[c] = 0; rl[c] = 0;
  qk = 0; do :: qk < RL -> pd[c*RL + qk] = 0; qk++ :: else -> break od; qk = 0;
  ftouch = ftouch & (2 - c)
}

inline client_tick(c) {
  if :: cs[c] == IDLE && gl[c] == 0 && tok[c] == 0 -> finish(c) :: else -> skip fi;
  if :: cs[c] != HOLDING -> rl[c] = 0 :: else -> skip fi;
  if
  :: LIVE(c) ->
     /* ages only of what is in flight (else 0: fewer states) */
     if :: OPF(c) -> age(oa[c]) :: else -> oa[c] = 0; opc[c] = 0 fi;
     if :: kq[c] > 0 -> age(ka[c]) :: else -> ka[c] = 0 fi;
     if :: hs[c] && ns[c] -> age(ca[c]) :: else -> ca[c] = 0 fi;  /* only a creation renews */
     if :: rq[c] -> age(ra[c]) :: else -> ra[c] = 0 fi;
     if :: kq[c] == kign[c] -> kpc[c] = 0 :: else -> skip fi;
     if :: lc[c] > 0 ->             /* in a blackhole: no answer will come */
           oa[c] = AMAX; ka[c] = AMAX; ra[c] = AMAX; ca[c] = AMAX; opc[c] = 0; kpc[c] = 0
        :: else -> skip fi;
#ifdef TOUCH_AT_SEND
     tm[c] = tm[c] << 1;
#endif
     down(mv[c]); down(kpc[c]); down(opc[c]);
     /* pending touches age; the oldest has now been answered RL ticks ago */
     q1 = c*RL + RL - 1;
     if :: pd[q1] > 1 && pd[q1] - 1 > mv[c] -> mv[c] = pd[q1] - 1 :: else -> skip fi;
     qk = RL - 1;
     do
     :: qk > 0 -> q1 = c*RL + qk; pd[q1] = (pd[q1-1] > 0 -> pd[q1-1] - 1 : 0); qk--
     :: else -> break
     od;
     pd[c*RL] = 0; q1 = 0;
     if :: kat[c] > 0 -> kat[c]-- :: else -> skip fi;
     if :: vu[c] > 0 -> vu[c]--;
           if :: vu[c] == 0 && cs[c] == HOLDING -> cs[c] = LOSTDEL :: else -> skip fi  /* Lost */
        :: else -> skip fi;
     prune(c);
     if :: lc[c] > 0 -> lc[c]--; if :: lc[c] == 0 -> disconnect(c) :: else -> skip fi :: else -> skip fi;
     if :: hq[c] > 0 -> hq[c]-- :: else -> skip fi;
     if :: pin[c] > 0 -> pin[c]-- :: else -> skip fi;
     if :: pa[c] > 0 -> pa[c]-- :: else -> skip fi
  :: else -> skip
  fi
}

inline client_timers(c) {
  if
  :: LIVE(c) && pa[c] == 0 && conn[c] == NOC && pin[c] == 0 ->
     /* reconnect: to any server that serves */
     if
     :: LEADER -> conn[c] = SL
     :: fst == UP -> conn[c] = SF
     :: DEPOSED -> conn[c] = SD
     :: else -> skip
     fi;
     if :: conn[c] != NOC -> hs[c] = 1; ca[c] = 0; csend(c, Q_CONN, ns[c]) :: else -> skip fi
  :: LIVE(c) && pa[c] == 0 && CONNECTED(c) ->
     if
     :: kat[c] == 0 && kq[c] == 0 -> ka_send(c); kq[c] = 1
     :: kat[c] == 0 && kq[c] == 1 ->     /* unanswered for an interval: send anew */
        kign[c] = 1; ka_send(c); kq[c] = 2
     :: else -> skip
     fi;
     if :: cs[c] == HOLDING && rl[c] && !rq[c] -> csend(c, Q_READ, 0); rq[c] = 1; ra[c] = 0
        :: else -> skip fi;
     if :: cs[c] == LOSTDEL -> opsend(c, Q_DELETE, tok[c], DELETING)
        :: cs[c] == CONFWAIT -> opsend(c, Q_CONFIRM, 0, CONFIRMING)
        :: else -> skip fi
  :: else -> skip
  fi
}

inline leader_tick(c) {
  if :: salive[c] -> lexp[c]--; if :: lexp[c] == 0 -> expire(c) :: else -> skip fi
     :: else -> skip fi
}

inline tick() {
  if :: BUSY -> SPEND(F_DELAY) :: else -> skip fi;   /* messages held a tick */
  client_tick(0); client_tick(1);
  if :: LEADER -> leader_tick(0); leader_tick(1) :: else -> skip fi;
  if
  :: fst == UP -> fping--;
     if :: fping == 0 ->
           if :: ftouch != 0 -> flsend(F_REPORT, 0, ftouch); ftouch = 0 :: else -> skip fi;
           fping = PING
        :: else -> skip fi
  :: fst == CUT -> fcut--;
     if :: fcut == 0 -> drop_clients(SF); fst = DOWN :: else -> skip fi
  :: fst == DOWN -> skip
  fi;
  if
  :: dt > 0 -> dt--;
     if
     :: dt == DWIN ->           /* the new leader starts: deadlines start + T */
        if :: salive[0] -> lexp[0] = T :: else -> skip fi;
        if :: salive[1] -> lexp[1] = T :: else -> skip fi
     :: dt == 0 -> step_down()      /* the deposed leader steps down */
     :: else -> skip
     fi
  :: else -> skip
  fi;
  client_timers(0); client_timers(1)
}

/* ---------------------------------------------------------------- faults */

inline client_choices(c) {
  if
  :: QUIET && LIVE(c) && pa[c] == 0 && cs[c] == IDLE && gl[c] > 0 && CONNECTED(c) -> enqueue(c)
  :: QUIET && LIVE(c) && pa[c] == 0 && cs[c] == HOLDING && CONNECTED(c) ->        /* release */
     opsend(c, Q_DELETE, tok[c], DELETING)
  :: QUIET && FAULT(F_DEATH) && cs[c] == HOLDING -> SPEND(F_DEATH);                /* the holder dies */
     disconnect(c); cs[c] = DEAD; dd = c + 1; pa[c] = 0; lc[c] = 0
  :: QUIET && FAULT(F_LINK) && ONLINE(c) && LIVE(c) -> SPEND(F_LINK); lc[c] = CLMAX;
     flush2(creq[c]); flush(cresp[c])   /* doomed: see csend */
  :: QUIET && lc[c] > 0 -> lc[c] = 0; disconnect(c)                              /* link torn down */
  :: QUIET && FAULT(F_PAUSE) && LIVE(c) -> SPEND(F_PAUSE); pa[c] = PMAX
  :: QUIET && pa[c] > 0 -> pa[c] = 0                                             /* resumes */
  :: QUIET && FAULT(F_HOLD) && ONLINE(c) && LIVE(c) -> SPEND(F_HOLD); hq[c] = HMAX  /* requests held */
  :: QUIET && hq[c] > 0 -> hq[c] = 0                                             /* ... reach the server */
  :: QUIET && FAULT(F_ADMIN) && LEADER && z[ZI(SL,c)] != 0 -> SPEND(F_ADMIN); adm[c] = 1;
     dz = z[ZI(SL,c)]; l_delete(c, dz); dz = 0
  fi
}

active proctype sys() {
  atomic {
    salive[0] = 1; salive[1] = 1; lexp[0] = T; lexp[1] = T;
    conn[0] = SF; conn[1] = SL;     /* sessions established at time 0 */
    vu[0] = VAL; vu[1] = VAL; tm[0] = 1; tm[1] = 1;
    kat[0] = KA; kat[1] = KA; gl[0] = K; gl[1] = K;
    fst = UP; fping = PING;
    c_code {
      if (getenv("ZKF_NF")) now.nf = atoi(getenv("ZKF_NF"));
      if (getenv("ZKF_FAULTS")) now.faults = atoi(getenv("ZKF_FAULTS"));
      if (getenv("ZKF_K")) { now.gl[0] = atoi(getenv("ZKF_K")); now.gl[1] = now.gl[0]; }
    }
  }
end:
  do
  /* deliveries */
  :: atomic { DQ(0) && conn[0] == SL -> creq[0]?m1,m2; s = 0; l_handle(s, m1, m2, 0); m1 = 0; m2 = 0; s = 0 }
  :: atomic { DQ(1) && conn[1] == SL -> creq[1]?m1,m2; s = 1; l_handle(s, m1, m2, 0); m1 = 0; m2 = 0; s = 0 }
  :: atomic { DQ(0) && conn[0] == SF -> f_handle(0) }
  :: atomic { DQ(1) && conn[1] == SF -> f_handle(1) }
  :: atomic { DQ(0) && conn[0] == SD -> d_handle(0) }
  :: atomic { DQ(1) && conn[1] == SD -> d_handle(1) }
  :: atomic { DR(0) -> client_recv(0) }
  :: atomic { DR(1) -> client_recv(1) }
  :: atomic { DFL -> l_from_follower() }
  :: atomic { DLF -> f_from_leader() }
  /* time */
  :: atomic { (!BUSY || FAULT(F_DELAY)) -> tick() }
  /* clients' own choices and faults: only between message deliveries (see
     README, "Reductions") */
  :: atomic { client_choices(0) }
  :: atomic { client_choices(1) }
  /* server faults */
  :: atomic { QUIET && FAULT(F_FCUT) && fst == UP -> SPEND(F_FCUT);       /* follower<->leader link lost */
              flush(fl); flush(lf); fst = CUT; fcut = FDROP }
  :: atomic { QUIET && FAULT(F_FCR) && fst != DOWN -> SPEND(F_FCR);       /* follower crash */
              flush(fl); flush(lf); drop_clients(SF); fst = DOWN }
  :: atomic { QUIET && FAULT(F_LCR) && dt == 0 -> SPEND(F_LCR);           /* leader crash: a new leader */
              flush(fl); flush(lf); drop_clients(SL);
              if :: fst == UP -> drop_clients(SF); fst = DOWN :: else -> skip fi;
              if :: salive[0] -> lexp[0] = T :: else -> skip fi;  /* deadlines reset */
              if :: salive[1] -> lexp[1] = T :: else -> skip fi }
  :: atomic { QUIET && FAULT(F_LCUT) && dt == 0 -> SPEND(F_LCUT);         /* the leader cut from its peers */
              /* its followers lose it; its own clients stay connected to it,
                 now deposed, with its tree and sessions as they are */
              flush(fl); flush(lf);
              if :: fst == UP -> fst = CUT; fcut = FDROP :: else -> skip fi;
              z[4] = z[0]; z[5] = z[1]; dal = salive[0] + 2*salive[1];
              if :: conn[0] == SL -> conn[0] = SD :: else -> skip fi;
              if :: conn[1] == SL -> conn[1] = SD :: else -> skip fi;
              dt = FDROP + DWIN }
  :: atomic { QUIET && dt > 0 && dt <= DWIN ->                            /* the deposed leader */
              step_down() }                                      /* notices, steps down */
  :: atomic { QUIET && fst == DOWN && LEADER ->                           /* follower (re)joins */
              fst = UP; z[2] = z[0]; z[3] = z[1]; ftouch = 0; fping = PING }
  od
}

/* (1) never two clients whose clocks say Held while both believe they hold */
active proctype p1() {
  atomic { (BEL(0) && vu[0] > 0 && BEL(1) && vu[1] > 0) -> assert(false) }
}

/* (5) if the holder dies, a contender is eventually granted */
#define P5 ((dd == 1 && CTD(1)) || (dd == 2 && CTD(0)))
#define Q5 ((dd == 1 && cs[1] == HOLDING) || (dd == 2 && cs[0] == HOLDING))
ltl live { [] (P5 -> <> Q5) }
