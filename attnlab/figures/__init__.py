"""What draws: the course's figures and interactive explorers, apart from what computes.

The computing modules (``attnlab.masks``, ``attnlab.attention``, ``attnlab.causality``, ...)
never import from here; these modules draw what they compute:

- :mod:`.plotting`: the heatmap of a matrix with token labels, captions and tiles, and the
  compact PNG every figure is shown as;
- :mod:`.frames`: an explorer's frames drawn once (axes and labels) and filled per setting;
- :mod:`.widgets`: the ipywidgets explorers of chapters 1 to 3 and their building blocks;
  :mod:`.live`: how an explorer follows its controls where a widget manager runs the kernel's
  callbacks (Colab, ipywidgets 7);
- :mod:`.fonts`: the fonts matplotlib draws Latin and CJK text with;
- one module per subject: :mod:`.masks` (chapter 8's masks and blocks),
  :mod:`.mask_gallery` (the masks of real models), :mod:`.causality` (chapter 5's leak maps and
  verdicts), :mod:`.cache` (chapter 6's KV cache), :mod:`.ring` (chapter 9's layouts and
  timelines), :mod:`.audit` (chapter 10's audit explorer).
"""
