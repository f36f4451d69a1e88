"""Stall samples and instructions of one kernel by phase, from an ncu source CSV and the SASS.

Run 50 produced bwd_v65_phases.txt with
    python3 phase_prof.py m3_cp_backward.csv v65.sass m3_cp_backward 2
(SRCDIR: the kernel sources of the profiled commit, 8d3f944 for run 50) where m3_cp_backward.csv is `ncu -i REPORT --page source --print-source cuda,sass --csv` of a
MAMBA3_JIT_LINEINFO=1 build, and v65.sass is `nvdisasm -gi -c` of the same cubin (the addresses in
the CSV, less the first, are the SASS offsets). Each instruction is charged to the chain of
inlined calls nvdisasm prints above it: first to the outermost call site (the phase of the job),
then to the next one in (second level). Optional: a kernel line number (5th argument) lists the
innermost lines inside that phase; FILE:LINE (6th) those under a second-level call.
"""
import csv,re,collections,sys,os
rows=list(csv.reader(open(sys.argv[1])))
hdr=None; sass=[]
for r in rows:
    if not r: continue
    if r[0]=="Line No": hdr=r; continue
    if r[0]=="" and len(r)>4 and r[2].startswith('0x'): sass.append(r)
H={h:i for i,h in enumerate(hdr)}
def v(r,k):
    try: return float(r[H[k]].replace(',',''))
    except: return 0.0
txt=open(sys.argv[2]).read().splitlines()
st=next(i for i,l in enumerate(txt) if l.startswith('.text.'+sys.argv[3]))
chain=None; local={}; fresh=True
for l in txt[st+1:]:
    if l.startswith('.text.') or l.startswith('\t.section'): break
    if '//## File' in l:
        fr=[(f.split('/')[-1],int(n)) for f,n in re.findall(r'"([^"]+)", line (\d+)',l)]
        if fresh: chain=[fr[0]]; fresh=False
        else: chain.append(fr[0])
        continue
    m=re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;',l)
    if m:
        local[int(m.group(1),16)]=chain; fresh=True
base=min(int(r[2],16) for r in sass)
srcs={}
def text(f,n):
    if f not in srcs:
        try: srcs[f]=open(os.path.join(os.environ.get('SRCDIR','kernel_src'),f)).read().splitlines()
        except: srcs[f]=[]
    L=srcs[f]; return L[n-1].strip()[:80] if 0<n<=len(L) else '?'
S=collections.Counter(); I=collections.Counter(); S2=collections.Counter(); I2=collections.Counter()
TS=TI=0
depth=int(sys.argv[4]) if len(sys.argv)>4 else 1
for r in sass:
    c=local.get(int(r[2],16)-base) or []
    s=v(r,"Warp Stall Sampling (All Samples)"); i=v(r,"Instructions Executed")
    TS+=s; TI+=i
    outer=c[-1] if c else ('?',0)
    S[outer]+=s; I[outer]+=i
    if len(c)>=2:
        k=(outer,c[-2]); S2[k]+=s; I2[k]+=i
print(f"total samples {TS:.0f} instr {TI:.4g}")
for k,s in sorted(S.items(), key=lambda x:-x[1])[:40]:
    print(f"{100*s/TS:5.1f}% samp {100*I[k]/TI:5.1f}% instr  {k[0]}:{k[1]}  {text(*k)}")
if depth>1:
    print("\n second level")
    for k,s in sorted(S2.items(), key=lambda x:-x[1])[:50]:
        print(f"{100*s/TS:5.1f}% samp {100*I2[k]/TI:5.1f}% instr  {k[0][1]} > {k[1][0]}:{k[1][1]}  {text(*k[1])}")
if len(sys.argv)>5:
    want=int(sys.argv[5])
    S3=collections.Counter(); I3=collections.Counter()
    for r in sass:
        c=local.get(int(r[2],16)-base) or []
        if not c or c[-1][1]!=want: continue
        s=v(r,"Warp Stall Sampling (All Samples)"); i=v(r,"Instructions Executed")
        S3[c[0]]+=s; I3[c[0]]+=i
    print(f"\n inside line {want}")
    for k,s in sorted(S3.items(), key=lambda x:-x[1])[:45]:
        print(f"{100*s/TS:5.1f}% samp {100*I3[k]/TI:5.1f}% instr  {k[0]}:{k[1]}  {text(*k)}")
if len(sys.argv)>6:
    f2,l2=sys.argv[6].split(':'); l2=int(l2)
    S4=collections.Counter(); I4=collections.Counter()
    for r in sass:
        c=local.get(int(r[2],16)-base) or []
        if len(c)<2 or c[-2]!=(f2,l2): continue
        s=v(r,"Warp Stall Sampling (All Samples)"); i=v(r,"Instructions Executed")
        key=c[-3] if len(c)>=3 else c[0]
        S4[(key, c[0])]+=s; I4[(key,c[0])]+=i
    print(f"\n inside {sys.argv[6]}")
    for k,s in sorted(S4.items(), key=lambda x:-x[1])[:40]:
        print(f"{100*s/TS:5.1f}% samp {100*I4[k]/TI:5.1f}% instr  {k[0][0]}:{k[0][1]} / {k[1][0]}:{k[1][1]}  {text(*k[0])[:60]} / {text(*k[1])[:50]}")
