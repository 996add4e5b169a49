import random, statistics, sys
def pct(v, q):
    v = sorted(v); k = (len(v)-1)*q/100; f = int(k); c = min(f+1, len(v)-1); return v[f]+(v[c]-v[f])*(k-f)
def sim(streams, W, cd, cp, policy, share=1.0, every=1, reqs=3, prompt=129, out=64, cap=512):
    t = 0.0
    clients = [{"left": reqs} for _ in range(streams)]
    active = []  # dict: client, pre (remaining prompt), gen, sent, last
    ttft, itl, tokens = [], [], 0
    def start(c):
        c["left"] -= 1
        active.append({"c": c, "pre": prompt, "gen": 0, "sent": t, "last": None})
    for c in clients: start(c)
    it = 0
    while active:
        dec = [r for r in active if r["pre"] == 0]
        pref = [r for r in active if r["pre"] > 0]
        d = len(dec)
        if d == 0: budget = cap
        elif policy == "time":
            budget = min(cap, int(share * cd * (d + len(pref)) / cp)) if it % every == 0 else 0
            budget = min(cap, int(every * share * cd * (d + len(pref)) / cp)) if it % every == 0 else 0
        it += 1
        if pref and budget == 0 and d == 0: budget = 1
        p = 0; done_pre = []
        for r in pref:
            if budget <= 0: break
            take = min(r["pre"], budget); r["pre"] -= take; budget -= take; p += take
            if r["pre"] == 0: done_pre.append(r)
        t += W + cd * d + cp * p
        for r in dec + done_pre:
            if r["last"] is None: ttft.append(t - r["sent"])
            else: itl.append(t - r["last"])
            r["last"] = t; r["gen"] += 1; tokens += 1
        for r in list(active):
            if r["gen"] >= out:
                active.remove(r)
                if r["c"]["left"] > 0: start(r["c"])
    return tokens / t, pct(ttft, 50), pct(ttft, 99), pct(itl, 50), pct(itl, 99)
W, cd, cp = [float(x) for x in sys.argv[1:4]]
for streams in (8, 32):
    for name, kw in [("share1", dict(policy="time")), ("share0.5", dict(policy="time", share=0.5)), ("share2", dict(policy="time", share=2)),
                     ("every3", dict(policy="time", every=3)), ("every4", dict(policy="time", every=4))]:
        r = sim(streams, W, cd, cp, **kw)
        print(streams, name, "tok/s %.0f ttft50 %.0f ttft99 %.0f itl50 %.0f itl99 %.0f" % (r[0], r[1]*1e3, r[2]*1e3, r[3]*1e3, r[4]*1e3))
