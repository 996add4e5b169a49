import json,statistics as st,glob
def load(p):
    d=json.load(open(p))['decode']
    pts={(m['label'],p['batch'],p['context']):p['tokens_per_s'] for m in d['models'] for p in m['points']}
    pts.update({(p['label'],'prefill',512):p['prompt_tokens_per_s'] for p in d.get('prefill',[])})
    return pts, [m['label'] for m in d['models']]
def med(kind,s,t):
    runs=[load(f)[0] for f in sorted(glob.glob(f'B_{kind}_{s}_t{t}_r*.json'))]
    return {k:st.median(r[k] for r in runs) for k in runs[0]}
labels=load('B_table_new_t2_r1.json')[1]
N={t:med('table','new',t) for t in (1,2)}; O={t:med('table','old',t) for t in (1,2)}
print('| model / weights | 1 thread: batch 1 / 8 / 32 / 64 / 512-token prompt | 2 threads: the same |')
print('|---|---|---|')
for l in labels:
    cells=[]
    for t in (1,2):
        cells.append(' / '.join(f"{N[t][k]:,.0f} ({N[t][k]/O[t][k]:.2f})" for k in [(l,b,128) for b in (1,8,32,64)]+[(l,'prefill',512)]))
    print(f'| {l} | {cells[0]} | {cells[1]} |')
LN={t:med('long','new',t) for t in (1,2)}; LO={t:med('long','old',t) for t in (1,2)}
print()
print('| model | 1 thread: ctx 2,048 / 8,192 / 32,768 | 2 threads: the same |')
print('|---|---|---|')
for l in ('abc','softmax'):
    print(f'| {l}/f32 | '+' | '.join(' / '.join(f"{LN[t][(l,1,c)]:,.0f} ({LN[t][(l,1,c)]/LO[t][(l,1,c)]:.2f})" for c in (2048,8192,32768)) for t in (1,2))+' |')
