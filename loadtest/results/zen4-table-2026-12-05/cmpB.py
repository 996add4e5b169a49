import json,sys,statistics as st,glob
def load(p):
    d=json.load(open(p))['decode']
    pts={(m['label'],p['batch'],p['context']):p['tokens_per_s'] for m in d['models'] for p in m['points']}
    pts.update({(p['label'],'prefill',512):p['prompt_tokens_per_s'] for p in d.get('prefill',[])})
    return pts
def med(kind,sysname,t):
    runs=[load(f) for f in sorted(glob.glob(f'B_{kind}_{sysname}_t{t}_r*.json'))]
    return {k:st.median(r[k] for r in runs) for k in runs[0]}, runs
for kind in ('table','long'):
  for t in (2,1):
    n,nr=med(kind,'new',t); o,orr=med(kind,'old',t)
    rs=sorted((n[k]/o[k],k) for k in n)
    vals=[r for r,_ in rs]
    print(f'--- {kind} t{t}: cells {len(rs)}, median new/old {st.median(vals):.3f}, geo {st.geometric_mean(vals):.3f}, <0.9: {sum(v<0.9 for v in vals)}, >1.1: {sum(v>1.1 for v in vals)}')
    for r,k in rs[:8]:
        spreadn=[x[k] for x in nr]; spreado=[x[k] for x in orr]
        print('  %.3f %s new %s old %s'%(r,k,[round(v) for v in spreadn],[round(v) for v in spreado]))
    for r,k in rs[-4:]:
        print('  %.3f %s'%(r,k))
