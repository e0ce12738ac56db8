export TORCH_CPP_LOG_LEVEL=ERROR PYTHONPATH=.
(timeout 300 python3 -m pytest -q -p no:cacheprovider -m cuda --timeout 120 --ignore=old_tree --ignore=scratch tests 2>&1 | tail -60 > $OUT/gputests.log) &
(timeout 250 python3 scratch/prof_model.py mobilenet_v3_large,swin_t,resnet50 64 > $OUT/prof.log 2>&1) 
wait
timeout 200 python3 tools/fuzz.py --device cuda --graphs 1000 --seed 1123 --jobs 8 --shrink 3 --out $OUT/fz > $OUT/fuzz.log 2>&1
tail -5 $OUT/fuzz.log
