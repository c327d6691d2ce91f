# What zsh offers on TAB: types $1 and TAB into an interactive zsh (in a zpty)
# whose fpath starts with $2, with compinit and compadd wrapped to print each
# match as <<MATCH>>; prints the matches, one a line.
# Used by src/completion.rs and tests/it/kubectl_completion.rs.
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z 'PROMPT=; RPROMPT=; fpath=('$2' $fpath); autoload -U compinit; compinit -u -D'
zpty -w z 'compadd() { if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return $?; fi; local -a __hits; builtin compadd -A __hits "$@"; local w; for w in $__hits; do print -r -- "<<$w>>"; done }'
zpty -w z "zstyle ':completion:*' list-prompt ''; zstyle ':completion:*' menu no; bindkey '^I' complete-word"
# Type only once the line editor reads the terminal: typeahead that arrives
# before it starts is not completed. zle-line-init marks each start of it.
zpty -w z 'zle-line-init() { print -n __ZLE''__ }; zle -N zle-line-init'
zpty -w z 'print __READY''__'
zpty -r z line '*__READY__*'
zpty -r z line '*__ZLE__*'
zpty -n -w z "$1"$'\t'
zpty -w z $'\C-u''print __DONE''__'
zpty -r z out '*__DONE__*'
print -r -- $out | grep -ao '<<[^>]*>>' | sed 's/^<<//; s/>>$//'
zpty -d z
