import json, sys, glob, collections
out = sys.argv[1]
rows = collections.defaultdict(list)
for f in sorted(glob.glob(out + '/*.jsonl')):
    tag = f.split('/')[-1].split('_')[0]
    for line in open(f):
        try: j = json.loads(line)
        except Exception: continue
        key = (j['d'], j['causal'], j['s'], j['b'], j['variant'])
        l2 = j.get('l2_kv_bytes', 0 if tag != 'A' else 'A')
        name = tag if tag == 'A' else f"{tag}:{l2 if l2 != 1099511627776 else 'all'}"
        if 'end_max_us' in j:
            print(f"probe d{j['d']} s{j['s']} b{j['b']} {j['variant']:45s} l2={name:12s} ms={j['ms']:.3f} blocks={j['blocks']} end min/med/max {j['end_min_us']:.0f}/{j['end_med_us']:.0f}/{j['end_max_us']:.0f} us start_mean {j['start_mean_us']}")
            continue
        rows[key].append((name, j['tflops']))
for key in sorted(rows):
    byname = collections.defaultdict(list)
    for n, t in rows[key]: byname[n].append(t)
    print(f"d{key[0]:3d} {'causal' if key[1] else 'full  '} s{key[2]:5d} b{key[3]:2d} {key[4]:45s} " + '  '.join(f"{n}={'/'.join(f'{t:.0f}' for t in ts)}" for n, ts in byname.items()))
