"""dots' benchmarks, one package per question, each run as `python -m benchmarks.<question> VARIANT`.

swap (how fast is a weight swap?), merge (what does a merge cost?), search (what does a search
cost?), pick (does the pick beat both sources?), grading (does dots grade as the truth does?),
scale (what do large models cost?), gpu (what does dots do on a GPU node?), versions (do two
versions of dots give the same bytes, and keep the user's data?). The shared harness: harness/;
the results of each question: results/<question>.md, indexed by RESULTS.md.
"""
